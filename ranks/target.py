"""What runs inside each rank: instrument, run the student's code, save the trace.

A launch's target says what each rank runs (the host's "launch" request):

    {"kind": "function", "student": PATH, "exercise": "2.3", "params": {...}, "companions": {...}}
        the student's module, imported, handed to the exercise's harness (ranks.exercises.ex2_3)
    {"kind": "script", "student": PATH}
        the whole module run as ``__main__``, as torchrun runs a script
"""

from __future__ import annotations

import importlib
import importlib.util
import runpy
import sys
from pathlib import Path
from typing import Callable

from ranks import trace
from ranks.rig import Place


def make_target(spec: dict) -> Callable[[], None]:
    student = Path(spec["student"])
    if spec["kind"] == "script":
        return script_target(student)
    harness = importlib.import_module(f"ranks.exercises.ex{spec['exercise'].replace('.', '_')}").harness
    return function_target(student, harness, spec.get("params", {}), spec.get("hidden", ()), spec.get("companions"))


def load_module(path: Path, name: str = "student"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def function_target(student: Path, harness: Callable, params: dict, hidden=(), companions: dict[str, str] | None = None):
    """A launch target that imports the student's module and hands it to the exercise's harness.

    The modules ``hidden`` cannot be imported (where there is a sandbox, their files are not even
    in it: see the grader's sandbox.py). With ``companions`` (exercise id -> the student's module of that exercise) the harness is also
    given them, imported, as ``companions``: a module, or why it could not be imported.
    """

    def target():
        place = Place.from_environment()
        rec = trace.Recorder(Path.cwd(), place.rank)
        trace.install(rec)
        for name in hidden:
            _hide(name)
        sys.argv = [str(student)]  # as if the cell were run on its own: argparse sees no grader flags
        try:
            module = load_module(student)
            given = params if companions is None else {
                **params, "companions": {i: _imported(Path(p)) for i, p in companions.items()}}
            rec.result = trace.plain(harness(module, place, rec, **given))
        except BaseException as exc:
            rec.fail(exc)
            raise
        finally:
            rec.buffers_at_the_end()
            rec.save()

    return target


def _imported(path: Path):
    """The module at ``path``, or why importing it failed."""
    try:
        return load_module(path, path.stem)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc)[:200]}"


def _hide(name: str):
    """Make `import name` fail in this rank, also where the host imported it before forking."""
    sys.modules[name] = None
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)


def script_target(student: Path):
    """A launch target that runs a whole script as torchrun would: as __main__, argv[0] the script."""

    def target():
        rec = trace.Recorder(Path.cwd(), Place.from_environment().rank)
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
            rec.buffers_at_the_end()
            rec.save()

    return target
