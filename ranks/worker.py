"""What each worker of a graded torchrun job runs: install the trace, then the student's script.

The grader starts ``torchrun [the job's options] -m ranks.worker SCRIPT ARGS...`` (or, for a
launch without torchrun, ``python -m ranks.worker SCRIPT ARGS...``). Each worker that torchrun
starts finds its place in the environment torchrun gave it (RANK, TORCHELASTIC_RESTART_COUNT, ...),
writes to its own files under ``$AUTOGRADER_TRACE/attempt<K>/``, and then runs the script as
``python SCRIPT ARGS...`` would: as ``__main__``, its directory first on ``sys.path``.

    rank<R>.pid          this worker's process id, so that the host can stop it and see it end
    rank<R>.log          its output
    rank<R>.stack        its Python stack, when the host asks for it (SIGUSR1)
    rank<R>.events ...   the trace (trace.py)
    rank<R>.exit         its exit code, when it ends by itself
    duplicate-rank<R>-agent<A>-<pid>   a worker of agent A found RANK R taken in this attempt, and left

Under torchrun, the process the agent starts is only a stand-in when the job has a fork server
(forkserver.py): the worker itself is forked, torch already imported, and runs ``become`` below.

The agent runs workers with PYTHONSAFEPATH set, so that neither the work directory nor anything a
previous attempt wrote there can stand in for this module.

A job may plant a fault: the worker of one rank in one attempt kills itself with SIGKILL after its
n-th optimizer step, or in the middle of writing its n-th file with torch.save (half the bytes
written). That is a real SIGKILL, the way a lost machine ends a worker. Only the job's fork server
holds the plan, and arms it in that one worker as it forks it: no environment variable, file or other
worker tells where it lands.
"""

from __future__ import annotations

import ctypes
import faulthandler
import io
import os
import signal
import sys
from pathlib import Path

from ranks.host import exit_code, output_to

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    _die_with_parent()
    server = os.environ.get("AUTOGRADER_FORKSERVER")
    if server and "RANK" in os.environ:
        from ranks.forkserver import stand_in

        stand_in(server, argv)  # ends this process as the warm worker ends, if the server answers
    become(argv)


def become(argv: list[str], line=None):
    """Be the worker: files of this rank and attempt, the trace, the script. Ends the process.
    ``line``: where to ask before going on after each step and save, in a job that plants a fault (faults.py)."""
    rank = int(os.environ.get("RANK", "0"))
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    folder = Path(os.environ["AUTOGRADER_TRACE"]) / f"attempt{attempt}"
    folder.mkdir(exist_ok=True)
    try:
        pid_file = os.open(folder / f"rank{rank}.pid", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        _taken(folder, rank)
    os.write(pid_file, str(os.getpid()).encode())
    os.close(pid_file)
    output_to(folder / f"rank{rank}.log")
    faulthandler.register(signal.SIGUSR1, file=open(folder / f"rank{rank}.stack", "w"), all_threads=True)
    faulthandler.enable(file=sys.stderr, all_threads=False)
    code = run(argv[0], argv[1:], folder, rank, attempt, line)
    sys.stdout.flush()
    sys.stderr.flush()
    (folder / f"rank{rank}.exit").write_text(str(code))
    os._exit(code)


def run(script: str, args: list[str], folder: Path, rank: int, attempt: int, line=None) -> int:
    import runpy

    import torch

    from ranks import trace

    torch.set_num_threads(1)
    _preload()
    rec = trace.Recorder(folder, rank)
    trace.install(rec)
    rec.event("worker", attempt=attempt, pid=os.getpid(),
              env={k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                  "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT", "AUTOGRADER_AGENT",
                                                  "MASTER_ADDR", "MASTER_PORT")})
    if line is not None:
        _ask_at_checkpoints(rec, line)
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = exit_code(exc)
        if code:
            rec.fail(exc)
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        rec.fail(exc)
        code = 1
    finally:
        rec.save()
    return code


def _taken(folder: Path, rank: int):
    """Another worker of this attempt already holds this RANK: the agents formed separate jobs (each
    numbers its workers from 0). Leave a mark the grader can count, and nothing else."""
    agent = os.environ.get("AUTOGRADER_AGENT", "0")
    (folder / f"duplicate-rank{rank}-agent{agent}-{os.getpid()}").touch()
    os._exit(3)


def _preload():
    """Import now what DDP's constructor would import inside a traced call (torch._dynamo: seconds of
    work). With several workers on few cores, such a call would look like a rank that waits. A worker
    forked from the fork server finds it imported already."""
    if "RANK" not in os.environ:
        return  # plain python: a job of one, which wraps nothing in DDP
    preload()


def preload():
    import importlib

    for name in filter(None, os.environ.get("AUTOGRADER_PRELOAD", "").split(",")):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def _ask_at_checkpoints(rec, sock):
    """Stop after each optimizer step, and halfway through writing each file (torch.save, or a copy), to ask
    the host whether to go on: where the job's fault lands, the host kills this worker (faults.py)."""
    from ranks.faults import Line

    line = Line(sock)

    def save(original, obj, f, args, kwargs):
        whole = io.BytesIO()
        original(obj, whole, *args, **kwargs)
        data = whole.getvalue()
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as out:
                _halves(out, data, line)
        else:
            _halves(f, data, line)

    def copy(original, src, dst, args, kwargs):
        with open(src, "rb") as source:
            data = source.read()
        with open(dst, "wb") as out:
            _halves(out, data, line)
        return dst

    rec.on_step, rec.on_save, rec.on_copy = lambda: line.ask("step"), save, copy


def _halves(out, data: bytes, line):
    """``data`` written in two halves, the first one on disk when the worker asks the host."""
    half = len(data) // 2
    out.write(data[:half])
    out.flush()
    try:
        fd = out.fileno() if hasattr(out, "fileno") else None
    except (OSError, ValueError, io.UnsupportedOperation):
        fd = None
    if fd is not None:
        os.fsync(fd)
    line.ask("save", fd)
    out.write(data[half:])


def _die_with_parent():
    """A worker ends with its agent: SIGKILL'd graders and agents leave no worker behind."""
    # The agent that started us, as it said before starting us: it may be dead already, and then
    # getppid() is no longer it.
    parent = int(os.environ.get("AUTOGRADER_AGENT_PID") or os.getppid())
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        return
    if os.getppid() != parent:  # the agent died before the line above
        os._exit(1)


if __name__ == "__main__":
    # Run as ranks.worker, not as __main__: the trace trusts only the code of the modules of its package.
    from ranks.worker import main as run_worker

    run_worker(sys.argv[1:])
