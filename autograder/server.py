"""A warm grader for one notebook kernel.

A fresh grader pays for importing torch (about 2 s) and, for exercises that build DDP,
torch._dynamo (about 2 s more) before it launches a single rank; the launches themselves
take a fraction of a second. A student re-runs a check cell many times, so the notebook
keeps one grader process alive per kernel and sends it every check:

    python -m autograder serve --root DIR

reads one JSON request a line on stdin, ``{"exercise", "path", "seed", "world_sizes"}``,
and answers each with one JSON line on stdout: ``{"report": {...}}``, or
``{"usage_error": "..."}``, or ``{"crash": "..."}`` when the grader itself failed.
``{"warm_up": CWD}``, sent as the kernel loads the extension, has no answer: the server starts
its rank host and has it import what the exercises need, before any check asks. ``{"warm_up": CWD,
"near": ID}``, sent when the cell of exercise ID of a lesson graded in a view of its own runs, starts
that view's host.

The student's code never runs in this process. It keeps one rank host (launch.py) warm for
this kernel, in the sandbox (two, once the student reaches lesson 3, whose exercise 3.1 must
not see a module of the course), and starts a new one whenever the last one was lost. That host
serves this student's checks only: another kernel, another student, has its own. DIR, made
by the kernel, holds the hosts' roots; the kernel removes it when it stops the server. The
server ends with the kernel: a kernel killed before it could stop the server (SIGKILL, a crash)
makes it end by itself, stopping its rank host and removing DIR and its log. A server also removes
what servers killed before they could clean up left behind.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path


PR_SET_PDEATHSIG = 1


def serve(root: Path) -> int:
    kernel = os.getppid()
    signal.signal(signal.SIGTERM, _end)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # the kernel gone: unwind, stop the host, clean up
    threading.Thread(target=_watch, args=(kernel,), daemon=True, name="kernel-watch").start()
    from autograder import engine, files
    from autograder.source import UsageError

    files.remove_stale(root.parent, ROOT_PREFIX)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not break the protocol
    hosts = engine.Hosts(engine.sandbox_mode(), parent=root)  # this kernel's rank hosts
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                request = json.loads(line)
                if "warm_up" in request:
                    _warm_up(hosts, request.get("near"))
                    continue
                report = engine.grade(request["exercise"], request["path"], request.get("world_sizes"),
                                      seed=request.get("seed", 0), hosts=hosts)
                answer = {"report": report.to_dict()}
            except UsageError as exc:
                answer = {"usage_error": str(exc)}
            except Exception:
                answer = {"crash": traceback.format_exc()}
            out.write(json.dumps(answer) + "\n")
            out.flush()
    finally:
        _cleaning.set()  # the signals that follow must not cut the clean-up short
        hosts.close()
        if _gone(kernel):  # nobody else will clean up after it
            _remove(list(root.parent.glob(f"{kernel_prefix(kernel)}*")))  # this work directory, its log, the cell
    return 0


def _remove(paths: list[Path], wait: float = 5.0):
    """Remove each path; one that fails (a rank of the stopped host still ending as its directory is emptied) is
    tried again for a few seconds, and never keeps the others from going."""
    from autograder import files

    deadline = time.monotonic() + wait
    for path in paths:
        while True:
            try:
                files.remove_tree(path) if path.is_dir() else path.unlink(missing_ok=True)
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)


def _watch(kernel: int, every: float = 0.2, patience: float = 2.0):
    """The kernel's death, told to the main thread itself. The death signal goes to the process, and any of its
    threads may take it (torch's among them): Python then runs the handler only when the main thread next runs
    Python code, and a main thread waiting in select() for a rank host that is still starting would not for
    seconds. A signal sent to the main thread interrupts that wait. The exit it raises can be swallowed (torch's
    C code, importing numpy, clears any error it meets): told again until the clean-up has begun."""
    while os.getppid() == kernel and _alive(kernel):
        time.sleep(every)
    while not _cleaning.is_set():
        _unwinding.clear()
        signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)
        _cleaning.wait(patience)


def _prctl(option: int, value: int):
    import ctypes

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)
    except OSError:
        pass  # not Linux: the kernel's own clean-up still stops this server


def _gone(kernel: int, wait: float = 5.0) -> bool:
    """Whether the kernel has died. Its end of stdin closes, and its death signal comes, while it is
    still dying: give it a moment to be gone."""
    deadline = time.monotonic() + wait
    while True:
        if os.getppid() != kernel or not _alive(kernel):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _warm_up(hosts, near: str | None = None):
    """This kernel's rank host, started with what the exercises import (DDP's torch._dynamo, FSDP, ...);
    and here, while it starts, every exercise's module (and so torch). ``near``, an exercise the student
    reached: the hosts of its lesson's other views of the course (exercises.views_near) too."""
    from autograder import exercises

    try:
        if near is None:
            host = hosts.get()
            host.prepare(("torch._dynamo",))  # what most need, first
            host.prepare(exercises.warm_imports(exercises.ids()))  # every exercise's module imported here too
        elif near in exercises.MODULES:
            for view in exercises.views_near(near):
                hosts.get(view)
    except Exception:  # the first check starts a host again, and reports what fails
        traceback.print_exc()


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


_unwinding = threading.Event()  # the main thread was told to stop (cleared when that was swallowed)
_cleaning = threading.Event()  # the main thread has reached its clean-up


def _end(signum, frame):
    """The kernel's death may signal twice (its death signal, the watching thread): unwind once, clean up."""
    if not (_unwinding.is_set() or _cleaning.is_set()):
        _unwinding.set()
        raise SystemExit(0)


def log_of(root: Path) -> Path:
    """Where a kernel's grader writes what it prints: beside its work directory."""
    return Path(f"{root}.log")


ROOT_PREFIX = "autograder-kernel-"


def kernel_prefix(pid: int) -> str:
    """How the names of a kernel's temporary files begin: its grader's work directory and log, and the
    file of the cell it is checking. The pid in it tells whose they are, and whether that kernel lives."""
    return f"{ROOT_PREFIX}{pid}-"


def new_root() -> Path:
    """The work directory of one kernel's grader."""
    return Path(tempfile.mkdtemp(prefix=kernel_prefix(os.getpid())))


class WarmGrader:
    """The kernel's side: starts the server on first use, restarts it after a failure."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.root: Path | None = None
        atexit.register(self.stop)

    def warm_up(self, near: str | None = None):
        """Start the server now, and have it get ready for the checks to come (of the lesson of the
        exercise ``near``, if given); answers nothing."""
        try:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            self.proc.stdin.write((json.dumps({"warm_up": os.getcwd(), "near": near}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            pass  # the first check starts it again, and says what went wrong

    def ask(self, request: dict, limit: float) -> tuple[dict | None, str]:
        """The server's answer, or None and what went wrong."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
            line = self._read_line(limit)
        except BaseException as exc:  # a timeout, a dead server, or the stop button
            self.stop()
            if not isinstance(exc, Exception):
                raise
            return None, f"{exc}\n{self._log_tail()}"
        return json.loads(line), ""

    def start_in_background(self):
        """A fresh server, starting while the student reads (its first answer waits for it to be ready)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()

    def stop(self):
        """Stop the server (its rank host dies with it) and remove its work directory and log."""
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None
        if self.root is not None:
            from autograder.files import remove_tree

            remove_tree(self.root)
            self.log.unlink(missing_ok=True)
            self.root = None

    def _start(self):
        self.root = new_root()
        self.log = log_of(self.root)
        with open(self.log, "wb") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autograder", "serve", "--root", str(self.root)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                start_new_session=True, cwd=tempfile.gettempdir(),
            )

    def _read_line(self, limit: float) -> bytes:
        deadline = time.monotonic() + limit
        buffer = b""
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            while not buffer.endswith(b"\n"):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the grader did not answer within {limit:g} s and was stopped")
                if selector.select(timeout=left):
                    chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                    if not chunk:
                        raise RuntimeError("the grader stopped without an answer")
                    buffer += chunk
        return buffer

    def _log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
