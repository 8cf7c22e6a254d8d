"""The workers of a torchrun job, forked from a warm process instead of started cold.

Every worker torchrun starts is ``python -m ranks.worker SCRIPT ...``: a fresh interpreter that
imports torch, and torch._dynamo (which DDP and every optimizer import), all over again. That is
seconds of CPU per worker and per attempt, most of a graded job's time on a small machine. So the
rank host starts one fork server per job, which has imported them once, and each process torchrun
starts is only a stand-in:

    stand-in (torchrun's child)  --- {"argv", "env", "cwd"} --->  fork server (the host's child)
                                 <--- {"pid"} ------------------  forks the worker, which runs the
                                 <--- {"status"} ---------------  script with the stand-in's argv,
                                                                  environment and working directory

The stand-in mirrors its worker for the agent:
- a signal the agent sends it (SIGTERM to stop the group, ...) is passed on to the worker;
- it ends as the worker ended: with the same exit code, or killed by the same signal;
- if it dies first (SIGKILL), the server kills the worker: the stand-in's connection closed.

torchrun, its agent, its rendezvous and its restarts are the real ones; only where each worker's
Python starts from is not. The server lives on an abstract Unix socket: inside the sandbox's own
network namespace, where nothing outside the job can reach it.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time

from ranks.host import PR_SET_DUMPABLE, PR_SET_PDEATHSIG, _prctl, _signal

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2)
# A worker that crashes by one of these writes no exit code of its own; its server, its parent, writes it
# (the rank host is not the worker's parent and could not tell a crash from a kill). SIGKILL is not among
# them: the rank host sends it, a planted fault or a stop, and knows it.
CRASHES = (signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT)
_exit_files: dict[int, str] = {}  # worker pid -> where its exit code goes


def listen(name: str) -> socket.socket:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind("\0" + name)
    listener.listen(128)
    return listener


def serve(listener: socket.socket, become, handing: socket.socket | None = None) -> None:
    """Fork a worker for each stand-in that connects; ``become(request)`` runs in the worker and never
    returns. Runs until killed (the host kills it with its job). With ``handing``, each worker gets a
    line to the rank host, whose other end goes to the host through it (faults.py): the request the
    worker becomes holds its end as "line"."""
    waiting: dict[socket.socket, bytes] = {}  # stand-ins whose request is not whole yet
    running: dict[socket.socket, int] = {}  # stand-in -> its worker's pid
    while True:
        ready, _, _ = select.select([listener, *waiting, *running], [], [], 0.02)
        for conn in ready:
            if conn is listener:
                waiting[listener.accept()[0]] = b""
            elif conn in running:  # a stand-in only speaks once: this is its end
                _kill(running.pop(conn))
                conn.close()
            else:
                try:
                    _read_request(conn, waiting, running, listener, become, handing)
                except (OSError, ValueError):  # a stand-in gone, or a request not ours: only it fails
                    waiting.pop(conn, None)
                    if conn in running:
                        _kill(running.pop(conn))
                    conn.close()
        _report_ended(running)


def _read_request(conn, waiting, running, listener, become, handing):
    chunk = conn.recv(1 << 20)
    if not chunk:
        del waiting[conn]
        conn.close()
        return
    waiting[conn] += chunk
    if b"\n" not in waiting[conn]:
        return
    request = json.loads(waiting.pop(conn).split(b"\n", 1)[0])
    if not isinstance(request, dict) or not all(k in request for k in ("argv", "env", "cwd")):
        raise ValueError("not a stand-in's request")
    sys.stdout.flush()
    sys.stderr.flush()
    ours, theirs = socket.socketpair() if handing is not None else (None, None)
    pid = os.fork()
    if pid == 0:
        for other in (listener, conn, *waiting, *running, *filter(None, (ours, handing))):
            other.close()
        _worker({**request, "line": theirs}, become)  # never returns
    if handing is not None:
        from ranks.faults import hand_over

        theirs.close()
        hand_over(handing, ours, pid, request["env"])
    running[conn] = pid
    env = request["env"]
    if isinstance(env, dict) and env.get("AUTOGRADER_TRACE") and str(env.get("RANK", "")).isdigit():
        _exit_files[pid] = os.path.join(env["AUTOGRADER_TRACE"], f"attempt{env.get('TORCHELASTIC_RESTART_COUNT', '0')}",
                                        f"rank{env['RANK']}.exit")
    conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")


def _report_ended(running: dict):
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _note_a_crash(pid, status)
        conn = next((c for c, p in running.items() if p == pid), None)
        if conn is not None:
            del running[conn]
            try:
                conn.sendall(json.dumps({"status": status}).encode() + b"\n")
            except OSError:
                pass
            conn.close()


def _note_a_crash(pid: int, status: int):
    path = _exit_files.pop(pid, None)
    if path and os.WIFSIGNALED(status) and os.WTERMSIG(status) in CRASHES:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError:
            return  # the worker wrote its own, or its folder is gone
        os.write(fd, str(-os.WTERMSIG(status)).encode())
        os.close(fd)


def _worker(request: dict, become):
    """In the forked worker: the process a cold start would have given, then ``become(request)``."""
    try:
        os.setpgid(0, 0)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # dies with the server
        _prctl(PR_SET_DUMPABLE, 1)  # as a worker started cold is; the server itself stays out of reach
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as in any fresh interpreter
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR2, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        _fresh_state(request["cwd"])
        become(request)
    finally:
        os._exit(1)


def _fresh_state(cwd: str):
    """What a fresh interpreter would not share with its siblings: random state, and the directory
    multiprocessing records at import (spawned children start there)."""
    import random

    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        torch.seed()  # a fresh interpreter seeds torch's default generator at random too
    if "multiprocessing.process" in sys.modules:
        sys.modules["multiprocessing.process"].ORIGINAL_DIR = os.path.abspath(cwd)


def stand_in(name: str, argv: list[str]) -> None:
    """In the process torchrun started: have the server fork the worker, mirror it, end as it ended.
    Returns (does nothing) only if the server cannot be reached: then the caller starts cold."""
    conn = _connect(name)
    if conn is None:
        return
    conn.sendall(json.dumps({"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}).encode() + b"\n")
    replies = conn.makefile("rb")
    started = json.loads(replies.readline() or b"{}")
    pid = started.get("pid")
    if not isinstance(pid, int):
        os._exit(1)
    for sig in FORWARDED:
        signal.signal(sig, lambda sig, _frame: _signal(pid, sig))
    ended = json.loads(replies.readline() or b"{}")
    status = ended.get("status")
    if not isinstance(status, int):
        os._exit(1)  # the server died: so did the worker (it dies with the server)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # those two cannot be handled, nor need to be
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)  # a signal the default action ignores: end with its number, as a shell would say it
        os._exit(128 - code)
    os._exit(code)


def _connect(name: str) -> socket.socket | None:
    deadline = time.monotonic() + 5.0  # the server binds as soon as it is forked, before any agent
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect("\0" + name)
            return conn
        except OSError:
            conn.close()
            if time.monotonic() > deadline:
                return None
            time.sleep(0.05)


def _kill(pid: int):
    _signal(pid, signal.SIGKILL)
