"""What each worker of a graded torchrun job runs: install the trace, then the student's script.

The grader starts ``torchrun [the job's options] -m autograder.worker SCRIPT ARGS...`` (or, for a
launch without torchrun, ``python -m autograder.worker SCRIPT ARGS...``). Each worker that torchrun
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

A job may ask for a fault (AUTOGRADER_FAULT, JSON): the worker of one rank in one attempt kills
itself with SIGKILL after its n-th optimizer step, or in the middle of writing its n-th file with
torch.save (half the bytes written). That is a real SIGKILL, the way a lost machine ends a worker.
"""

from __future__ import annotations

import ctypes
import faulthandler
import io
import json
import os
import signal
import sys
from pathlib import Path

from autograder.host import exit_code, output_to

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    _die_with_parent()
    server = os.environ.get("AUTOGRADER_FORKSERVER")
    if server and "RANK" in os.environ:
        from autograder.forkserver import stand_in

        stand_in(server, argv)  # ends this process as the warm worker ends, if the server answers
    become(argv)


def become(argv: list[str]):
    """Be the worker: files of this rank and attempt, the trace, the script. Ends the process."""
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
    code = run(argv[0], argv[1:], folder, rank, attempt)
    sys.stdout.flush()
    sys.stderr.flush()
    (folder / f"rank{rank}.exit").write_text(str(code))
    os._exit(code)


def run(script: str, args: list[str], folder: Path, rank: int, attempt: int) -> int:
    import runpy

    import torch

    from autograder import trace

    torch.set_num_threads(1)
    _preload()
    rec = trace.Recorder(folder, rank)
    trace.install(rec)
    rec.event("worker", attempt=attempt, pid=os.getpid(),
              env={k: os.environ.get(k) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
                                                  "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT", "AUTOGRADER_AGENT")})
    _plan_fault(rec, rank, attempt)
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


def _plan_fault(rec, rank: int, attempt: int):
    """Arm the fault this job asks for, if it is this worker's."""
    try:
        fault = json.loads(os.environ.get("AUTOGRADER_FAULT") or "null")
    except ValueError:
        fault = None
    if not isinstance(fault, dict) or (fault.get("rank"), fault.get("attempt", 0)) != (rank, attempt):
        return
    n, counted = int(fault.get("n", 1)), {"step": 0, "save": 0}

    def due(kind: str) -> bool:
        if fault.get("when") != kind:
            return False
        counted[kind] += 1
        return counted[kind] == n

    def after_step():
        if due("step"):
            rec.event("fault", when="step", n=n)
            _kill_self()

    def save(original, obj, f, args, kwargs):
        if not due("save"):
            return original(obj, f, *args, **kwargs)
        whole = io.BytesIO()
        original(obj, whole, *args, **kwargs)
        half = whole.getvalue()[: len(whole.getvalue()) // 2]
        if isinstance(f, (str, os.PathLike)):
            with open(f, "wb") as out:
                out.write(half)
                out.flush()
                os.fsync(out.fileno())
        else:
            f.write(half)
            f.flush()
        rec.event("fault", when="save", n=n, path=os.path.abspath(f) if isinstance(f, (str, os.PathLike)) else None)
        _kill_self()

    rec.on_step, rec.on_save = after_step, save


def _kill_self():
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


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
    main(sys.argv[1:])
