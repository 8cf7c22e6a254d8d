"""Start N ranks the way torchrun does, watch them, and always clean up.

How a launch works
------------------
The grader has already imported torch, so each rank is *forked* from it: a fork costs
about 50 ms where a fresh interpreter that imports torch costs about 2 s. A forked rank

1. leads a process group of its own, so that it and anything it starts can be killed
   together, and asks the kernel to kill it if the grader dies;
2. sends its output to ``rank<N>.log`` in the launch's work directory, and dumps its
   Python stack into ``rank<N>.stack`` when it receives SIGUSR1;
3. waits on a pipe for the rendezvous port, then sets the environment torchrun sets
   (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...);
4. runs the target and leaves with ``os._exit``: 0 when the target returned.

The rendezvous is a TCPStore that the grader hosts on a port the operating system
picks, one per launch, and that every rank joins as a client (torchrun's
TORCHELASTIC_USE_AGENT_STORE contract). Graders running side by side never share a port.

While ranks run, the grader polls them. A rank that finished while others are still
running after ``grace`` seconds means the others wait for something that will never
come (a collective that not every rank called): that is reported as a hang, in
seconds rather than at the end of the wall-clock limit. Hung ranks are asked for their
stack before they are killed. Every rank's process group is killed on every outcome.
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

PR_SET_PDEATHSIG = 1


@dataclass
class Layout:
    """How ranks map onto (simulated) nodes: torchrun's --nnodes x --nproc-per-node."""

    world_size: int
    nodes: int = 1

    @property
    def local_world_size(self) -> int:
        return -(-self.world_size // self.nodes)

    def local_rank(self, rank: int) -> int:
        return rank % self.local_world_size

    def node_rank(self, rank: int) -> int:
        return rank // self.local_world_size


@dataclass
class RankExit:
    rank: int
    exitcode: int | None  # None: still running when the grader stopped it
    output: str = ""
    stack: str = ""


@dataclass
class LaunchResult:
    layout: Layout
    workdir: Path
    ranks: list[RankExit]
    elapsed: float
    hung: bool = False  # some ranks finished and the rest did not follow
    timed_out: bool = False  # the wall-clock limit passed

    @property
    def world_size(self) -> int:
        return self.layout.world_size


def torchrun_environment(layout: Layout, rank: int, port: int, use_gpus: bool) -> dict[str, str]:
    """The variables torchrun gives each worker (see torch.distributed.run)."""
    env = {
        "RANK": str(rank),
        "LOCAL_RANK": str(layout.local_rank(rank)),
        "WORLD_SIZE": str(layout.world_size),
        "LOCAL_WORLD_SIZE": str(layout.local_world_size),
        "GROUP_RANK": str(layout.node_rank(rank)),
        "GROUP_WORLD_SIZE": str(layout.nodes),
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(layout.world_size),
        "ROLE_NAME": "default",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": f"autograder-{os.getpid()}-{port}",
        "OMP_NUM_THREADS": "1",
        "AUTOGRADER_BACKEND": "nccl" if use_gpus else "gloo",
    }
    if not use_gpus:
        # Hide GPUs so that `"nccl" if torch.cuda.is_available() else "gloo"` picks gloo.
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def launch(
    target: Callable[[int, Layout], None],
    layout: Layout,
    workdir: Path,
    *,
    use_gpus: bool = False,
    timeout: float = 60.0,
    grace: float = 5.0,
) -> LaunchResult:
    """Run ``target(rank, layout)`` in ``layout.world_size`` forked ranks; cwd is ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    pids: dict[int, int] = {}
    pipes: dict[int, int] = {}
    exits: dict[int, int] = {}
    result = LaunchResult(layout, workdir, [], 0.0)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        for rank in range(layout.world_size):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                _rank_main(target, rank, layout, workdir, read_end, use_gpus)  # never returns
            os.close(read_end)
            _set_own_group(pid)
            pids[rank], pipes[rank] = pid, write_end
        store = torch.distributed.TCPStore(
            "127.0.0.1", 0, layout.world_size, is_master=True, wait_for_workers=False
        )
        for rank, fd in pipes.items():
            os.write(fd, f"{store.port}\n".encode())
            os.close(fd)
        pipes.clear()
        _watch(pids, exits, result, start, timeout, grace)
        del store
    finally:
        for fd in pipes.values():
            os.close(fd)
        _kill_all(pids, exits)
    result.elapsed = time.monotonic() - start
    result.ranks = [
        RankExit(
            rank,
            exits.get(rank),
            _read(workdir / f"rank{rank}.log"),
            _read(workdir / f"rank{rank}.stack"),
        )
        for rank in range(layout.world_size)
    ]
    return result


def _set_own_group(pid: int):
    try:
        os.setpgid(pid, pid)  # the child does the same; whichever runs first wins
    except (PermissionError, ProcessLookupError):
        pass


def _rank_main(target, rank: int, layout: Layout, workdir: Path, port_fd: int, use_gpus: bool):
    code = 1
    try:
        os.setpgid(0, 0)
        _die_with_parent()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        log = os.open(workdir / f"rank{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        stack_file = open(workdir / f"rank{rank}.stack", "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
        port = int(os.read(port_fd, 64).decode().strip() or 0)
        os.close(port_fd)
        os.environ.update(torchrun_environment(layout, rank, port, use_gpus))
        os.chdir(workdir)
        torch.set_num_threads(1)
        target(rank, layout)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _die_with_parent():
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass  # not Linux: the grader's own cleanup still kills every rank


def _watch(pids, exits, result: LaunchResult, start: float, timeout: float, grace: float):
    first_exit: float | None = None
    while len(exits) < len(pids):
        for rank, pid in pids.items():
            if rank in exits:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                exits[rank] = os.waitstatus_to_exitcode(status)
                first_exit = first_exit or time.monotonic()
        now = time.monotonic()
        running = [r for r in pids if r not in exits]
        if not running:
            break
        if now - start > timeout:
            result.timed_out = True
        elif first_exit is not None and now - first_exit > grace:
            result.hung = not any(code != 0 for code in exits.values())
            if not result.hung:
                return  # a rank crashed; the rest wait for it in vain: no stacks needed
        else:
            time.sleep(0.01)
            continue
        _dump_stacks({r: pids[r] for r in running}, result.workdir)
        return


def _dump_stacks(pids: dict[int, int], workdir: Path):
    for pid in pids.values():
        try:
            os.kill(pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline and not all(_read(workdir / f"rank{r}.stack") for r in pids):
        time.sleep(0.02)
    time.sleep(0.05)  # let the last dump finish writing


def _kill_all(pids: dict[int, int], exits: dict[int, int]):
    for rank, pid in pids.items():
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if rank not in exits:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
