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
import edits  # noqa: E402, F401  (tests/submissions/edits.py: negative controls written as edits)


@functools.cache
def sandbox_missing() -> str | None:
    """Why no rank host starts in the sandbox here, or None when one does: bubblewrap being installed is
    not enough (user namespaces may be off, the course may lie where the sandbox cannot show it), and a
    hostile submission graded without it would run on the course itself."""
    from autograder import sandbox
    from autograder.launch import HostFailed, RankHost

    box, why = sandbox.probe()
    if box is None:
        return why
    host = RankHost(sandbox=box)
    try:
        host.started()
    except HostFailed as exc:
        return f"bubblewrap could not start the rank host: {str(exc).splitlines()[-1][:200]}"
    finally:
        host.close()
    return None


needs_sandbox = pytest.mark.needs_sandbox  # skipped, with the reason, where sandbox_missing() says why


@functools.cache
def slurm_missing() -> str | None:
    """Why exercise 4.6's Slurm cannot run in the sandbox here (it needs the grader as root, and Slurm), or None."""
    import os

    from autograder.batch import missing

    if sandbox_missing():
        return f"no sandbox: {sandbox_missing()}"
    if os.geteuid() != 0:
        return "the sandbox's own Slurm needs the grader to run as root"
    return missing() or None


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_sandbox: runs only where the sandbox really starts")


def pytest_runtest_setup(item):
    if item.get_closest_marker("needs_sandbox") and sandbox_missing():
        pytest.skip(f"no sandbox here: {sandbox_missing()}")


@pytest.fixture(autouse=True)
def sandbox_required(request, monkeypatch):
    """A test that needs the sandbox grades with it or not at all, through every front end it starts:
    what it grades may be hostile, and must never run on the course itself."""
    if request.node.get_closest_marker("needs_sandbox"):
        monkeypatch.setenv("AUTOGRADER_SANDBOX", "required")


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


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """A temporary directory of this test's own, for the grader and everything it starts: what the test
    finds left in it is its own, whatever else grades on this machine meanwhile."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.fixture
def clean(private_tmp, no_leftover_processes):
    """Nothing of a grading may be left running, nor in its temporary directory."""
    yield private_tmp
    left = sorted(p.name for p in private_tmp.iterdir())
    assert not left, f"left in the temporary directory: {left}"


class Sentinel:
    """A file and a directory outside everything a grading may touch, as a gradebook and its folder are."""

    def __init__(self, where: Path):
        self.dir = where / "sentinel-dir"
        self.dir.mkdir()
        (self.dir / "inside.txt").write_text("other students' work")
        self.file = where / "gradebook.db"
        self.file.write_bytes(b"SQLite format 3\0 every student's grades")
        self.seen = self.state()

    def state(self) -> dict:
        import hashlib

        found = {}
        for path in (self.file, self.dir, *sorted(self.dir.rglob("*"))):
            info = path.lstat()
            found[str(path)] = (info.st_uid, info.st_gid, oct(info.st_mode), info.st_size, info.st_mtime_ns,
                                hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "")
        return found


@pytest.fixture
def sentinel(tmp_path):
    """After the test, the sentinel file and directory are byte for byte, owner for owner, as they were."""
    guard = Sentinel(tmp_path)
    yield guard
    assert guard.state() == guard.seen, "something outside the sandbox was changed"


@pytest.fixture
def host(no_leftover_processes):
    """A rank host for the test, in the sandbox where this machine has one."""
    from autograder.engine import Hosts

    with Hosts("auto") as hosts:
        yield hosts.get()


def code_for(host, name: str, code: str):
    """``code`` written where the host's ranks read their code, as ``name``.py: its path as the ranks see it."""
    import textwrap

    outside, inside = host.code_directory()
    (outside / f"{name}.py").write_text(textwrap.dedent(code))
    return inside / f"{name}.py"


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
