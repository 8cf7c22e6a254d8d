"""A warm grader for one notebook kernel.

A fresh grader pays for importing torch (about 2 s) and, for exercises that build DDP,
torch._dynamo (about 2 s more) before it launches a single rank; the launches themselves
take a fraction of a second. A student re-runs a check cell many times, so the notebook
keeps one grader process alive per kernel and sends it every check:

    python -m autograder serve

reads one JSON request a line on stdin, ``{"exercise", "path", "seed", "world_sizes"}``,
and answers each with one JSON line on stdout: ``{"report": {...}}``, or
``{"usage_error": "..."}``, or ``{"crash": "..."}`` when the grader itself failed.
The student's code never runs in this process: ranks are forked from it, as from the
command line. It dies with the kernel that started it.
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
import time
import traceback
from pathlib import Path


def serve() -> int:
    from autograder.launch import _die_with_parent

    _die_with_parent()
    from autograder import engine
    from autograder.source import UsageError

    out = sys.stdout
    sys.stdout = sys.stderr  # anything else printed must not break the protocol
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            report = engine.grade(request["exercise"], request["path"], request.get("world_sizes"),
                                  seed=request.get("seed", 0))
            answer = {"report": report.to_dict()}
        except UsageError as exc:
            answer = {"usage_error": str(exc)}
        except Exception:
            answer = {"crash": traceback.format_exc()}
        out.write(json.dumps(answer) + "\n")
        out.flush()
    return 0


class WarmGrader:
    """The kernel's side: starts the server on first use, restarts it after a failure."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        handle, name = tempfile.mkstemp(prefix="autograder-server-", suffix=".log")
        os.close(handle)
        self.log = Path(name)
        atexit.register(self.close)

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

    def stop(self):
        if self.proc is not None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the server and every rank it forked
            except ProcessLookupError:
                pass
            self.proc.wait()
            self.proc = None

    def close(self):
        """Stop the server and remove its log: when the kernel exits."""
        self.stop()
        self.log.unlink(missing_ok=True)

    def _start(self):
        with open(self.log, "ab") as log:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "autograder", "serve"],
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
