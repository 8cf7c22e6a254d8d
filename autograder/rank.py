"""What runs inside each rank: instrument, run the student's code, save the trace."""

from __future__ import annotations

import importlib.util
import runpy
import sys
from pathlib import Path
from typing import Callable

from autograder import trace
from autograder.launch import Layout


def load_module(path: Path, name: str = "student"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def function_target(student: Path, harness: Callable, params: dict, hidden: tuple[str, ...] = (),
                    companions: dict[str, str] | None = None):
    """A launch target that imports the student's module and hands it to the exercise's harness.

    With ``companions`` (exercise id -> the student's module of that exercise) the harness is also
    given them, imported, as ``companions``: a module, or why it could not be imported.
    """

    def target(rank: int, layout: Layout):
        rec = trace.Recorder(Path.cwd(), rank)
        trace.install(rec)
        for name in hidden:
            _hide(name)
        sys.argv = [str(student)]  # as if the cell were run on its own: argparse sees no grader flags
        try:
            module = load_module(student)
            given = params if companions is None else {
                **params, "companions": {i: _imported(Path(p)) for i, p in companions.items()}}
            rec.result = trace.plain(harness(module, rank, layout, rec, **given))
        except BaseException as exc:
            rec.fail(exc)
            raise
        finally:
            rec.save()

    return target


def _imported(path: Path):
    """The module at ``path``, or why importing it failed."""
    try:
        return load_module(path, path.stem)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _hide(name: str):
    """Make `import name` fail in this rank, even where the grader imported it before forking."""
    sys.modules[name] = None
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)


def script_target(student: Path):
    """A launch target that runs a whole script as torchrun would: as __main__, argv[0] the script."""

    def target(rank: int, layout: Layout):
        rec = trace.Recorder(Path.cwd(), rank)
        trace.install(rec)
        sys.argv = [str(student)]
        try:
            runpy.run_path(str(student), run_name="__main__")
        except SystemExit as exc:
            if exc.code not in (0, None):
                rec.fail(exc)
            raise
        except BaseException as exc:
            rec.fail(exc)
            raise
        finally:
            rec.save()

    return target
