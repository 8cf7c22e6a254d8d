import functools
import importlib.util
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SUBMISSIONS = ROOT / "tests" / "submissions"
sys.path.insert(0, str(SUBMISSIONS))
import edits  # noqa: E402  (tests/submissions/edits.py: negative controls written as edits)


def browser_missing() -> str | None:
    """Why the browser tests (test_browser.py) cannot run here, or None when they can."""
    import shutil

    if not any(map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))):
        return "no Chromium on PATH (Debian: apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install -e '.[test]')"
    return None


def descendants(pid: int) -> set[int]:
    """Live processes under `pid` (zombies are not, nor the ps that lists them), from ps."""
    ps = subprocess.Popen(["ps", "-eo", "pid=,ppid=,stat="], stdout=subprocess.PIPE, text=True)
    out = ps.communicate()[0]
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        child, parent, stat = line.split()
        if not stat.startswith("Z") and int(child) != ps.pid:
            children.setdefault(int(parent), []).append(int(child))
    found, stack = set(), [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def alive(pids) -> set[int]:
    """Those of `pids` still running (a zombie has ended)."""
    return {pid for pid in pids if _alive(pid)}


def rank_processes() -> set[int]:
    """PIDs of live processes descended from this test run (ranks the grader forked)."""
    return descendants(os.getpid())


@pytest.fixture
def no_leftover_processes():
    """Fails the test if it leaves any process of ours running."""
    before = rank_processes()
    yield
    left = sorted(alive(rank_processes() - before))
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes left behind: {left}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def python() -> str:
    return sys.executable


@functools.cache
def script(name: str):
    """scripts/NAME.py as a module (a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def handed_in(released: Path, answers: dict[str, str]):
    """The released notebook with each exercise cell in `answers` replaced by its answer."""
    import nbformat

    from autograder.source import magic_id

    nb = nbformat.read(released, as_version=4)
    for cell in nb.cells:
        exercise_id = magic_id(cell.source) if cell.cell_type == "code" else None
        if exercise_id in answers:
            cell.source = f"%%exercise {exercise_id}\n{answers[exercise_id]}"
    return nb
