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


def rank_processes() -> set[int]:
    """PIDs of live processes descended from this test run (ranks the grader forked)."""
    out = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        pid, ppid = map(int, line.split())
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    found.discard(os.getpid())
    return found


@pytest.fixture
def no_leftover_processes():
    """Fails the test if it leaves any process of ours running."""
    before = rank_processes()
    yield
    left = rank_processes() - before
    alive = [pid for pid in left if _alive(pid)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, f"processes left behind: {alive}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def python() -> str:
    return sys.executable


@functools.cache
def release_script():
    """scripts/release.py as a module (it is a script, not part of the package)."""
    spec = importlib.util.spec_from_file_location("release", ROOT / "scripts" / "release.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
