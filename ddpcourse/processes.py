"""Run a function on several CPU processes that form a process group, and collect what each returns.

The lessons use this to show every idea on real processes from inside a notebook:
``launch(body, world_size=3)`` runs ``body(rank, world_size)`` in three processes and returns
the three results, in rank order.

How a launch works
------------------
- The parent *forks* the ranks. A forked child is a copy of the running notebook, so `body`
  can be a function defined in a notebook cell (a freshly spawned interpreter could not import
  it from the notebook's ``__main__``).
- The ranks meet through a file in a new temporary directory (``init_method="file://..."``),
  so there is no network port to choose or to clash. They use gloo on the CPU on every machine,
  and one thread each, so that several ranks share the cores fairly; none touches a GPU.
- Every rank writes its outcome to its own file in that directory: the pickled return value,
  or the traceback of what it raised, with the time it was raised.
- The parent waits for the ranks. When one fails it gives the others a moment to end (ranks
  waiting for the failed one usually fail soon after), stops the rest, and raises a
  `RankFailed` with the traceback of the rank that failed *first*: later failures are mostly
  consequences ("connection closed by peer").
- After `timeout` seconds it asks every rank still running for its Python stack
  (faulthandler), kills it, and raises `LaunchTimeout` with those stacks.
- Whatever happens, no rank is left running and the temporary directory is removed.
"""

from __future__ import annotations

import faulthandler
import os
import pickle
import shutil
import signal
import tempfile
import time
import traceback
from datetime import timedelta
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ddpcourse.devices import pick

GRACE_S = 3.0  # how long the other ranks may take to end after one has failed


class RankFailed(RuntimeError):
    """A rank raised an exception (or died); the message holds its traceback."""

    def __init__(self, rank: int, details: str):
        super().__init__(f"rank {rank} failed:\n{details}")
        self.rank = rank
        self.details = details


class LaunchTimeout(TimeoutError):
    """Ranks were still running after the launch's timeout; the message holds their stacks."""


def hide_gpus_from_this_process() -> int:
    """Make torch in this process see no GPU, for good; return how many GPUs the machine has.

    The ranks `launch` forks are copies of this process. On a machine with GPUs, the first backward
    pass here starts one autograd thread per GPU, and a forked copy of a process with those threads
    refuses to run backward ("Unable to handle autograd's threading in combination with fork-based
    multiprocessing"). With no GPU in sight, autograd starts none, and the forked ranks work (on the
    CPU, as they do everywhere). Processes started afresh (subprocess, torchrun) still see every GPU.
    Call it before anything asks torch about GPUs: torch counts them once per process.
    """
    if not torch.backends.cuda.is_built():
        return 0
    machine = max(torch.cuda._device_count_nvml(), 0)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    try:
        seen = torch._C._cuda_getDeviceCount()  # counted now with none visible, and kept
    finally:
        if visible is None:
            del os.environ["CUDA_VISIBLE_DEVICES"]
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
    if seen:
        raise RuntimeError("torch had already counted this machine's GPUs: restart the kernel and call "
                           "hide_gpus_from_this_process() before anything asks torch about GPUs")
    return machine


def launch(body: Callable[..., Any], world_size: int = 2, *, timeout: float = 60.0,
           group_timeout: float | timedelta | None = None, **kwargs) -> list[Any]:
    """Run ``body(rank, world_size, **kwargs)`` in `world_size` forked processes; return the results by rank.

    The processes form a gloo process group before `body` starts, and leave it together after it
    returns. `group_timeout` (seconds) is the group's timeout, after which a collective that some
    rank never joins fails (PyTorch's default for gloo is 30 minutes); `timeout` bounds the
    whole launch. Return values must be picklable: tensors, numbers, strings, lists, dicts.
    """
    if isinstance(group_timeout, (int, float)):
        group_timeout = timedelta(seconds=group_timeout)
    run_dir = Path(tempfile.mkdtemp(prefix="ddpcourse-launch-"))
    context = mp.get_context("fork")
    ranks = [context.Process(target=_rank_main, args=(rank, world_size, run_dir, body, kwargs, group_timeout),
                             name=f"rank{rank}", daemon=True) for rank in range(world_size)]
    try:
        for process in ranks:
            process.start()
        _wait(ranks, run_dir, time.monotonic() + timeout, timeout)
        return [_outcome(run_dir, rank)[1] for rank in range(world_size)]
    finally:
        for process in ranks:
            if process.pid is not None and process.exitcode is None:
                process.kill()
            if process.pid is not None:
                process.join()
        shutil.rmtree(run_dir, ignore_errors=True)


def _rank_main(rank, world_size, run_dir, body, kwargs, group_timeout):
    """What each forked process runs: join the group, run the body, write the outcome."""
    torch.set_num_threads(1)
    stack_file = open(run_dir / f"stack_{rank}.txt", "w")  # noqa: SIM115 (open until the process ends)
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=False)
    try:
        backend, _ = pick(rank, world_size, gpu_count=0)  # the CPU everywhere: results comparable
        options = {} if group_timeout is None else {"timeout": group_timeout}
        dist.init_process_group(backend, init_method=f"file://{run_dir / 'rendezvous'}",
                                rank=rank, world_size=world_size, **options)
        try:
            dist.barrier()  # every rank connected before any body runs (and possibly ends early)
            result = body(rank, world_size, **kwargs)
            dist.barrier()  # leave together: messages in flight reach their receivers first
            data = pickle.dumps(("ok", result))
        except BaseException:  # noqa: BLE001 (everything a rank raises goes to the parent)
            # timed before leaving the group: the peers fail only once this rank has left
            data = pickle.dumps(("error", (time.time(), traceback.format_exc())))
        finally:
            dist.destroy_process_group()
    except BaseException:  # noqa: BLE001
        data = pickle.dumps(("error", (time.time(), traceback.format_exc())))
    partial = run_dir / f"outcome_{rank}.partial"
    partial.write_bytes(data)
    partial.rename(run_dir / f"outcome_{rank}.pkl")  # the parent never reads half a file


def _outcome(run_dir: Path, rank: int):
    path = run_dir / f"outcome_{rank}.pkl"
    return pickle.loads(path.read_bytes()) if path.exists() else None


def _wait(ranks, run_dir: Path, deadline: float, timeout: float) -> None:
    """Wait until every rank has ended; raise on the first failure or at the deadline."""
    running = {p.sentinel: p for p in ranks}
    failed_at = None
    while running:
        limit = deadline if failed_at is None else min(deadline, failed_at + GRACE_S)
        ended = wait(list(running), timeout=max(0.0, limit - time.monotonic()))
        for sentinel in ended:
            process = running.pop(sentinel)
            process.join()
            outcome = _outcome(run_dir, ranks.index(process))
            if failed_at is None and (outcome is None or outcome[0] != "ok" or process.exitcode != 0):
                failed_at = time.monotonic()
        if not ended and running:  # the deadline or the grace period has passed
            if failed_at is None:
                raise LaunchTimeout(_stacks(ranks, running.values(), run_dir, timeout))
            break
    if failed_at is not None:
        raise _first_failure(ranks, run_dir)


def _stacks(ranks, stuck, run_dir: Path, timeout: float) -> str:
    stuck = sorted(stuck, key=ranks.index)
    for process in stuck:
        os.kill(process.pid, signal.SIGUSR1)
    time.sleep(0.5)  # time to write the stacks
    parts = [f"rank(s) {', '.join(str(ranks.index(p)) for p in stuck)} still running after {timeout:g} s; "
             "stopped. Where each one was:"]
    for process in stuck:
        stack = (run_dir / f"stack_{ranks.index(process)}.txt").read_text().strip()
        parts.append(f"--- rank {ranks.index(process)}:\n{stack or '(no Python stack)'}")
    return "\n".join(parts)


def _first_failure(ranks, run_dir: Path) -> RankFailed:
    errors, died = [], []
    for rank, process in enumerate(ranks):
        outcome = _outcome(run_dir, rank)
        if outcome is not None and outcome[0] == "error":
            errors.append((outcome[1][0], rank, outcome[1][1]))
        elif outcome is None and process.exitcode not in (0, None):
            died.append((rank, process.exitcode))
    if errors:
        _, rank, details = min(errors)  # the earliest: the others mostly fail because of it
        return RankFailed(rank, details)
    rank, code = died[0]
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    return RankFailed(rank, f"the process {how} without reporting an outcome")
