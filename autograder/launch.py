"""Start N ranks the way torchrun does, watch their progress, and always clean up.

How a launch works
------------------
The grader starts one rank host (ranks/host.py) per grading, or one per notebook, inside the
sandbox when the machine has one (sandbox.py), in a control group of its own (limits.py), and
asks it to launch each world size. The host forks the ranks; each one sets torchrun's environment
variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, ...), which the grader computes here, and
joins a rendezvous store that the host opened on a port the operating system picked, one per
launch, as torchrun's agent store (TORCHELASTIC_USE_AGENT_STORE).

Every host start gets a root of its own, which no rank has touched: the code the ranks run is
written by the grader into a directory of that root that the sandbox shows read-only, and the
ranks write only in the sandbox's work directory, an in-memory file system of its own that dies
with the sandbox. There the grader makes a new directory for each grading and each launch,
through a descriptor, under a name no rank could guess, and reads what the ranks left through
descriptors too (files.py).

While the ranks run, the grader reads the events each rank records (ranks/trace.py): every call
that can block (joining the group, a collective, a message, mp.spawn) is written down as it
is entered and as it is left. That is how a hang is told from slow work, by progress
rather than by a fixed grace period:

- a rank that is not inside a blocking call is computing, and is waited for, up to the
  wall-clock limit;
- when every rank still running has been inside a blocking call for ``quiet`` seconds with
  no event from anyone, nothing can move any more: that is a deadlock, whether a peer has
  exited (a collective it never called) or not (ranks waiting in different collectives, in
  collectives of different shapes, or for peers that never join). The waiting ranks are
  asked for their Python stacks and the launch is stopped.

Every rank's exit code (or the signal that killed it) and the order of exits come from the
host; output, stacks and events are read from the launch's work directory as capped,
plain data.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath

from autograder import files
from autograder.limits import Group, Limits
from autograder.sandbox import CODE, HOSTS, SCRATCH, WORK, mounted_in, package_dir


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
    exitcode: int | None  # None: still running when the grader stopped it; -N: killed by signal N
    output: str = ""
    stack: str = ""
    order: int | None = None  # 0 for the first rank to end, 1 for the next, ...


@dataclass
class Stall:
    """Why the grader stopped ranks that were all waiting: what each one waited in."""

    waiting: dict[int, dict]  # rank -> its pending `enter` event
    exited: list[int]  # ranks already gone when it was seen


@dataclass
class Directory:
    """A directory the grader made for the ranks: where the ranks see it, and the grader's descriptor of it."""

    inside: PurePosixPath
    folder: files.Folder

    def close(self):
        self.folder.close()


@dataclass
class LaunchResult:
    layout: Layout
    workdir: PurePosixPath  # as the ranks saw it (compared with the paths they recorded, never opened)
    folder: files.Folder  # the same directory, as the grader reads it
    ranks: list[RankExit]
    elapsed: float
    timeout: float
    stall: Stall | None = None  # every running rank was blocked and nothing moved
    timed_out: bool = False  # the wall-clock limit passed
    host_failure: str = ""  # the rank host died or spoke nonsense
    stopped_at: float | None = None  # wall-clock time (as in the trace) the grader stopped a hang
    events: dict[int, list[dict]] = field(default_factory=dict)
    events_sha256: dict[int, str] = field(default_factory=dict)  # of each rank's event file as read
    # A torchrun job (jobs.py): every attempt's workers, the last one's also in ranks/events above;
    # each agent's exit code (None: stopped by the grader) and what the agents printed.
    attempts: list[Attempt] = field(default_factory=list)
    agents: dict[int, int | None] = field(default_factory=dict)
    agent_output: str = ""
    # The agents ran this long with no worker of theirs running, and the grader stopped them: they
    # waited at a rendezvous that did not form.
    unmet: float | None = None
    load: float = 0.0  # runnable processes per CPU (1-minute average) when the time limit passed
    out_of_memory: bool = False  # the kernel killed a process of the submission for want of memory
    disk_full: bool = False  # the sandbox's file systems were full when the launch ended
    faults: list[dict] = field(default_factory=list)  # the planted faults that landed, as the host told them
    slurm: dict = field(default_factory=dict)  # a batch job (4.6): what the host said of it, and each attempt's run

    @property
    def world_size(self) -> int:
        return self.layout.world_size


@dataclass
class Attempt:
    """One start of a torchrun job's workers (torchrun starts them all again after a failure)."""

    number: int
    folder: files.Folder
    ranks: list[RankExit]
    events: dict[int, list[dict]]
    events_sha256: dict[int, str]
    duplicates: list[str] = field(default_factory=list)  # "rank R, agent A": a worker that found its RANK taken


def torchrun_environment(layout: Layout, rank: int, use_gpus: bool) -> dict[str, str]:
    """The variables torchrun gives each worker (see torch.distributed.run), but the rendezvous port and
    the run id, which the rank host adds once it has opened the launch's store."""
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
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "OMP_NUM_THREADS": "1",
        "AUTOGRADER_BACKEND": "nccl" if use_gpus else "gloo",
    }
    if not use_gpus:
        # Hide GPUs so that `"nccl" if torch.cuda.is_available() else "gloo"` picks gloo.
        env["CUDA_VISIBLE_DEVICES"] = ""
    elif layout.nodes > 1:
        env["CUDA_VISIBLE_DEVICES"] = node_gpus(layout, layout.node_rank(rank))
    return env


def node_gpus(layout: Layout, node: int) -> str:
    """The GPUs a node simulated on this machine may see: node k's local rank r runs on the machine's
    GPU k*L + r (L ranks per node), where every node would otherwise claim cuda:r, which nccl refuses
    ("Duplicate GPU detected")."""
    return ",".join(str(node * layout.local_world_size + r) for r in range(layout.local_world_size))


# Per rank: address space (CPU ranks only), size of any file written, and processes of the
# sandbox's user (threads count too: a rank with gloo runs a few dozen). The whole submission's
# limits are limits.Limits.
LIMITS = {"memory_mb": 6144, "file_mb": 256, "processes": 512}
MESSAGE_LIMIT = 1 << 20  # bytes of one line from the host
# The host, started by absolute path in isolated mode: nothing on its sys.path that a rank could write.
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from ranks.host import main; sys.exit(main(sys.argv[2:]))"


ROOT_PREFIX = "autograder-host-"  # then the grader's pid: a root whose grader is gone is removed by the next


class HostFailed(Exception):
    """The rank host could not start or stopped answering."""


class RankHost:
    """The grader's side of one rank host: start it, give it code, ask it to launch, watch, stop it."""

    def __init__(self, *, sandbox=None, hidden: tuple[str, ...] = (), limits: Limits | None = None,
                 parent: Path | None = None):
        self.sandbox = sandbox.fresh() if sandbox else None
        self.hidden = tuple(hidden)
        self.limits = limits or Limits.from_environment()
        files.remove_stale(Path(parent or tempfile.gettempdir()), ROOT_PREFIX)
        self.root = Path(tempfile.mkdtemp(prefix=f"{ROOT_PREFIX}{os.getpid()}-", dir=parent))  # the grader's alone
        self.code = self.root / "code"  # what the ranks run: written by the grader only
        self.code.mkdir(mode=0o755)
        self.group, self.unlimited = None, ""  # the control group, or why there is none
        self.work: files.Folder | None = None
        self.scratch: list[files.Folder] = []  # the sandbox's /tmp and /dev/shm, emptied after each grading
        self.mounts: dict[str, frozenset[str]] = {}  # in each, what the sandbox shows there: never emptied
        self.buffer, self.unprepared, self.broken = b"", 0, ""
        self.oom_seen = 0
        command = [sys.executable, "-I", "-c", BOOT, str(package_dir("ranks").parent)]
        info, keep = None, ()
        if self.sandbox:
            hosts = self.root / "hosts"
            hosts.write_text(HOSTS)
            info, write = os.pipe()
            command = self.sandbox.wrap(command + ["--sandboxed"], code=self.code, hosts=hosts, hidden=self.hidden,
                                        work_mb=self.limits.work_mb, tmp_mb=self.limits.tmp_mb, info_fd=write,
                                        accounts=self.root)
            self.group, self.unlimited = Group.create(self.limits)
            command = self.group.joined(command) if self.group else command
            keep = (write,)
        else:
            (self.root / "work").mkdir()
        self.info = info
        self.errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.errors,
                                     start_new_session=True, cwd="/", pass_fds=keep)
        for fd in keep:
            os.close(fd)
        self.prepare(())

    def started(self, timeout: float = 30.0):
        """Wait until the host runs (inside the sandbox: the sandbox works); HostFailed if it does not."""
        message = self.receive(timeout)
        if message is None or "hello" not in message:
            raise HostFailed(self.why_dead() if message is None else "the rank host did not start")
        self.work = self._open_work()

    def _open_work(self) -> files.Folder:
        """The sandbox's work directory, through a descriptor opened once the sandbox runs (its own
        mount, which no rank can replace); without a sandbox, the root's work directory."""
        if self.sandbox is None:
            path = self.root / "work"
            return files.Folder(path)
        raw = b""
        while chunk := os.read(self.info, 4096):
            raw += chunk
            if len(raw) > 65536:
                break
        os.close(self.info)
        self.info = None
        info = files.parse_json(raw)
        if not isinstance(info, dict) or not isinstance(info.get("child-pid"), int):
            raise HostFailed("bubblewrap did not say which process runs the sandbox")
        root = f"/proc/{info['child-pid']}/root"
        try:
            folders = [files.Folder(PurePosixPath(inside), os.open(f"{root}{inside}", os.O_RDONLY | os.O_DIRECTORY))
                       for inside in (WORK, *SCRATCH)]
        except OSError as exc:
            raise HostFailed(f"the sandbox's work directory cannot be opened: {exc.strerror}") from None
        self.scratch = folders[1:]
        self.mounts = {inside: mounted_in(inside, self.hidden) for inside in SCRATCH}
        return folders[0]

    @property
    def inside(self) -> PurePosixPath:
        """The work directory, where the ranks see it."""
        return PurePosixPath(WORK) if self.sandbox else PurePosixPath(self.root / "work")

    def alive(self) -> bool:
        """Running, and never caught out of step: a host that failed once is not asked again."""
        return self.proc.poll() is None and not self.broken

    def note(self) -> str:
        """What the report says of the sandbox: "bubblewrap", with how the whole submission was limited."""
        if not self.sandbox:
            return ""
        if self.group:
            return "bubblewrap"
        return f"bubblewrap; no limit on the whole submission here ({self.unlimited}), only per process"

    def send(self, **request):
        self._usable()
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._failed(self.why_dead()) from None

    def _usable(self):
        if self.broken:
            raise HostFailed(self.broken)

    def _failed(self, why: str) -> HostFailed:
        """The host cannot be trusted to be in step any more: it is not asked again."""
        self.broken = self.broken or why
        return HostFailed(why)

    def receive(self, timeout: float) -> dict | None:
        """The host's next message, or None when none came in ``timeout`` seconds."""
        self._usable()
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            if not chunk:
                raise self._failed(self.why_dead())
            self.buffer += chunk
            if len(self.buffer) > MESSAGE_LIMIT and b"\n" not in self.buffer:
                raise self._failed("the rank host sent an oversized message")
        line, self.buffer = self.buffer.split(b"\n", 1)
        if len(line) > MESSAGE_LIMIT:
            raise self._failed("the rank host sent an oversized message")
        message = files.parse_json(line)
        if not isinstance(message, dict):
            raise self._failed("the rank host sent a message that is not a JSON object")
        if "host_error" in message:
            raise self._failed(str(message["host_error"])[-2000:])
        return message

    def directory(self, parent: Directory | None, prefix: str, *, exact: bool = False) -> Directory:
        """A new directory for the ranks to write in: in ``parent``, else in the work directory. Named
        ``prefix-<random>``, or ``prefix`` itself (``exact``) where ``parent`` was made just now."""
        base = parent.folder if parent else self.work
        owner = self.sandbox.owner() if self.sandbox else None
        name, folder = base.make(prefix, owner, exact=exact)
        return Directory((parent.inside if parent else self.inside) / name, folder)

    def code_directory(self) -> tuple[Path, PurePosixPath]:
        """A new directory for one grading's code, written by the grader: where it writes, where the ranks read."""
        path = Path(tempfile.mkdtemp(dir=self.code))
        path.chmod(0o755)
        return path, (PurePosixPath(CODE) / path.name if self.sandbox else PurePosixPath(path))

    def prepare(self, imports):
        """Have the host import these modules once, before it forks ranks that need them (none it hides)."""
        shown = [m for m in imports if not any(m == h or m.startswith(h + ".") for h in self.hidden)]
        self.send(op="prepare", imports=shown)
        self.unprepared += 1

    def wait_ready(self, timeout: float = 120.0):
        while self.unprepared:
            message = self.receive(timeout)
            if message is None:
                raise self._failed(f"the rank host did not get ready within {timeout:g} s")
            self.unprepared -= bool(message.get("prepared"))

    def why_dead(self) -> str:
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            return "the rank host stopped answering"
        self.errors.seek(0)
        said = [line for line in self.errors.read()[-4000:].decode(errors="replace").splitlines()
                if line.strip() and "[c10d]" not in line]
        code = self.proc.returncode
        how = (f"was killed by {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
               else f"ended with exit code {code}")
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL):
            how = "was killed (SIGKILL): did the submission kill the processes it could see?"
        if self.out_of_memory():
            how = f"was killed: the submission used more than {self.limits.describe()}"
        return f"the process that ran the ranks {how}" + (f" ({said[-1][:300]})" if said else "")

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of this host for want of memory since this was last asked."""
        kills = self.group.oom_kills() if self.group else 0
        new, self.oom_seen = kills > self.oom_seen, kills
        return new

    def disk_full(self) -> bool:
        """Whether the sandbox's work directory, /tmp or /dev/shm has no room left (under 1 MB)."""
        full = False
        for folder in [self.work, *self.scratch] if self.sandbox else ():
            try:
                info = os.fstatvfs(folder.fd)
                full = full or info.f_bavail * info.f_frsize < (1 << 20)
            except (OSError, TypeError):
                pass
        return full

    def clear(self, grading: Directory):
        """What one grading left: its directory, and whatever its ranks wrote in the sandbox's /tmp and /dev/shm."""
        grading.close()
        files.remove_in(self.work, grading.inside.name)
        for folder in self.scratch:
            files.empty(folder, keep=self.mounts[str(folder.path)])

    def export(self, path: str, out: Directory, name: str, within: PurePosixPath) -> dict:
        """A checkpoint the ranks saved at ``path`` (in ``within``, or the sandbox's /tmp), read back by the host
        into ``out``/``name`` as arrays."""
        self.send(op="export", path=path, out=str(out.inside / name),
                  within=[str(within), *(["/tmp"] if self.sandbox else [])])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            message = self.receive(deadline - time.monotonic())
            if message is not None and "exported" in message:
                if isinstance(message["exported"], dict):
                    return message["exported"]
                break
        raise self._failed("the rank host did not export the checkpoint")

    def close(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the host, or bwrap: its namespace dies with it
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.errors.close()
        if self.info is not None:
            os.close(self.info)
        for folder in [self.work, *self.scratch]:
            if folder is not None:
                folder.close()
        self.work, self.scratch = None, []
        if self.group is not None:
            self.group.remove()
        files.remove_tree(self.root)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- one launch ------------------------------------------------------------------------

    def launch(self, target: dict, layout: Layout, where: Directory, *, backend: str = "gloo",
               timeout: float = 60.0, quiet: float = 2.0, limits: dict | None = None) -> LaunchResult:
        """Run ``target`` (see ranks/target.py) on ``layout.world_size`` ranks; their cwd is ``where``."""
        self.wait_ready()
        folder = where.folder
        start = time.monotonic()
        result = LaunchResult(layout, where.inside, folder, [], 0.0, timeout)
        watch = Watch(layout.world_size, folder)
        try:
            environments = [torchrun_environment(layout, r, backend == "nccl") for r in range(layout.world_size)]
            self.send(op="launch", workdir=str(where.inside), environments=environments, backend=backend,
                      target=target, limits=self._limits(limits or LIMITS))
            self._watch(watch, result, start, timeout, quiet)
        except HostFailed as exc:
            result.host_failure = str(exc)
        result.out_of_memory, result.disk_full = self.out_of_memory(), self.disk_full()
        watch.poll()
        result.elapsed = time.monotonic() - start
        result.ranks = [
            RankExit(r, watch.exits.get(r), folder.read_text(f"rank{r}.log"), folder.read_text(f"rank{r}.stack"),
                     watch.order.index(r) if r in watch.order else None)
            for r in range(layout.world_size)
        ]
        result.events = watch.events
        result.events_sha256 = {r: tail.digest.hexdigest() for r, tail in watch.tails.items() if not tail.overflow}
        for tail in watch.tails.values():
            tail.close()
        return result

    def job(self, request: dict, layout: Layout, where: Directory, *, timeout: float = 60.0, quiet: float = 2.0,
            meet_within: float = 20.0, limits: dict | None = None) -> LaunchResult:
        """Run a torchrun job (see jobs.py) to its end: its agents, their workers, every attempt.
        The workers' files go under ``where``, their working directory is ``where``/run. Agents
        that run ``meet_within`` seconds with no worker are stopped: their rendezvous did not form.
        A fault the request plants ("fault") goes to the host only once it has said that the job's processes
        are forked: no request the host had read when it forked them held it."""
        self.wait_ready()
        request = dict(request)
        fault = request.pop("fault", None)
        planted = request.pop("planted", fault is not None)
        sizes = request.pop("attempt_sizes", None) or (layout.world_size,)
        run = self.directory(where, "run", exact=True)
        run.close()
        folder = where.folder
        start = time.monotonic()
        result = LaunchResult(layout, where.inside, folder, [], 0.0, timeout)
        watch = JobWatch(sizes, folder, [options is not None for options in request["agents"]])
        try:
            self.send(op="job", workdir=str(where.inside), cwd=str(where.inside / "run"),
                      limits=self._limits(limits or LIMITS), planted=planted, **request)
            if fault is not None:
                self._until_started(watch, timeout)
                self.send(op="plant", fault=fault)
            self._watch(watch, result, start, timeout, quiet, unmet=meet_within)
        except HostFailed as exc:
            result.host_failure = str(exc)
        result.out_of_memory, result.disk_full = self.out_of_memory(), self.disk_full()
        watch.poll()
        result.elapsed = time.monotonic() - start
        result.attempts = watch.result()
        if result.attempts:
            last = result.attempts[-1]
            result.ranks, result.events, result.events_sha256 = last.ranks, last.events, last.events_sha256
        else:
            result.ranks = [RankExit(r, None) for r in range(layout.world_size)]
        lost = {f.get("agent") for f in watch.faults if f.get("lost")}  # machines the grader took away: not failures
        result.agents = {i: watch.agents.get(i) for i in range(len(request["agents"])) if i not in lost}
        result.agent_output = "\n".join(folder.read_text(f"agent{i}.log") for i in result.agents)
        result.faults = watch.faults
        watch.close()
        return result

    def batch(self, request: dict, layout: Layout, where: Directory, *, timeout: float, preempt_after: int,
              limits: dict | None = None) -> LaunchResult:
        """Run a batch job on a Slurm of the sandbox's own (ranks/slurm.py) to its end, and preempt it once
        rank 0 of its first run has taken ``preempt_after`` optimizer steps. The workers of every run of the job
        (Slurm starts it again after the requeue) are its attempts, in order; what Slurm said is ``slurm``."""
        self.wait_ready()
        run = self.directory(where, "run", exact=True)
        run.close()
        folder, start = where.folder, time.monotonic()
        result = LaunchResult(layout, where.inside, folder, [], 0.0, timeout)
        runs: list[JobWatch] = []
        said: dict = {"preempted": None}
        worked = 0.0  # when a worker of the job was last seen running
        try:
            self.send(op="slurm", workdir=str(where.inside), cwd=str(where.inside / "run"),
                      limits=self._limits(limits or LIMITS), **request)
            done = False
            while not done:
                message = self.receive(0.1)
                while message is not None and not done:
                    done = self._take_batch(message, runs, said)
                    message = None if done else self.receive(0)
                _discover_runs(runs, folder, layout.world_size)
                for watch in runs:
                    watch.poll()
                if said["preempted"] is None and runs and _steps_of_rank0(runs[0]) >= preempt_after:
                    said["preempted"] = {"asked": True}
                    self.send(op="preempt")
                if any(watch._workers_alive() for watch in runs):
                    worked = time.monotonic()
                idle = time.monotonic() - worked if worked else 0.0
                if not done and (time.monotonic() - start > timeout or idle > BATCH_IDLE):
                    result.stopped_at = time.time()
                    if idle > BATCH_IDLE:
                        result.unmet = idle  # the job still runs, and no worker of it: agents wait for others
                    else:
                        result.timed_out, result.load = True, os.getloadavg()[0] / (os.cpu_count() or 1)
                    self.send(op="stop", stacks=[])
                    deadline = time.monotonic() + 30
                    while not done and time.monotonic() < deadline:
                        message = self.receive(0.5)
                        done = message is not None and self._take_batch(message, runs, said)
                    break
        except HostFailed as exc:
            result.host_failure = str(exc)
        result.out_of_memory, result.disk_full = self.out_of_memory(), self.disk_full()
        _discover_runs(runs, folder, layout.world_size)
        result.elapsed = time.monotonic() - start
        for k, watch in enumerate(runs):
            watch.poll()
            for attempt in watch.result():
                result.attempts.append(replace(attempt, number=len(result.attempts)))
                said.setdefault("runs", []).append(k)
            watch.close()
        if result.attempts:
            last = result.attempts[-1]
            result.ranks, result.events, result.events_sha256 = last.ranks, last.events, last.events_sha256
        else:
            result.ranks = [RankExit(r, None) for r in range(layout.world_size)]
        result.agent_output = folder.read_text("batch.out")
        result.agents = {0: 0 if said.get("state") == "COMPLETED" else None}  # the batch job, as Slurm ended it
        result.slurm = said
        return result

    @staticmethod
    def _take_batch(message: dict, runs: list, said: dict) -> bool:
        """One message of the host about the batch job; True when it says the job is over."""
        if isinstance(message.get("slurm"), dict):
            said.update({k: v for k, v in message["slurm"].items() if isinstance(v, (str, int)) or v is None})
        if isinstance(message.get("preempted"), dict):
            said["preempted"] = {"asked": True, "ok": bool(message["preempted"].get("ok")),
                                 "said": str(message["preempted"].get("said", ""))[:500]}
        if "exit" in message and isinstance(message.get("run"), int) and 0 <= message["run"] < len(runs):
            runs[message["run"]].take({k: v for k, v in message.items() if k != "run"})
        return bool(message.get("done"))

    def _until_started(self, watch, timeout: float):
        """The host's messages, to the one that says the job's processes are all forked."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.receive(deadline - time.monotonic())
            if message is None:
                break
            watch.take(message)
            if "started" in message:
                return
        raise self._failed("the rank host did not start the job")

    def _limits(self, limits: dict) -> dict:
        """The process limit counts every process of the user: only for a user of the sandbox's own."""
        own_user = self.sandbox is not None and self.sandbox.drop_privileges
        return {k: v for k, v in limits.items() if k != "processes" or own_user}

    def _watch(self, watch, result: LaunchResult, start: float, timeout: float, quiet: float,
               unmet: float | None = None):
        done = False
        while not done:
            message = self.receive(0.05)
            while message is not None:
                watch.take(message)
                done = done or bool(message.get("done"))
                message = self.receive(0) if not done else None
            if done:
                break
            watch.poll()
            if time.monotonic() - start > timeout:
                result.timed_out = True
                result.load = os.getloadavg()[0] / (os.cpu_count() or 1)
            elif unmet is not None and watch.idle() > unmet:
                result.unmet = watch.idle()
            else:
                stall = watch.stalled(quiet)
                if stall is None:
                    continue
                result.stall = stall
            result.stopped_at = time.time()
            self.send(op="stop", stacks=watch.running())
            self._drain(watch)
            return

    def _drain(self, watch: Watch):
        """After a stop: the remaining exits, until the host says the launch is over."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            message = self.receive(max(deadline - time.monotonic(), 0))
            if message is None:
                raise HostFailed("the rank host did not stop the ranks")
            watch.take({**message, "code": None} if "exit" in message else message)
            if message.get("done"):
                watch.poll()
                return


class Watch:
    """What the grader knows of each rank while it runs: its events, its pending call, its exit."""

    def __init__(self, world_size: int, folder: files.Folder):
        self.world_size = world_size
        self.tails = {r: files.Tail(folder, f"rank{r}.events") for r in range(world_size)}
        self.events: dict[int, list[dict]] = {r: [] for r in range(world_size)}
        self.pending: dict[int, dict | None] = {r: None for r in range(world_size)}
        self.exits: dict[int, int | None] = {}
        self.order: list[int] = []
        self.last_progress = time.monotonic()

    def take(self, message: dict):
        """What the host said: a rank ended."""
        if "exit" in message:
            self.exited(message["exit"], message.get("code"))

    def running(self) -> list[int]:
        return [r for r in range(self.world_size) if r not in self.exits]

    def exited(self, rank, code):
        if isinstance(rank, int) and 0 <= rank < self.world_size and rank not in self.exits:
            self.exits[rank] = code if isinstance(code, int) else None
            self.order.append(rank)
            self.last_progress = time.monotonic()

    def poll(self):
        for rank, tail in self.tails.items():
            for event in tail.read():
                self.events[rank].append(event)
                self.last_progress = time.monotonic()
                if event.get("kind") == "enter":
                    self.pending[rank] = event
                elif event.get("kind") == "leave":
                    self.pending[rank] = None

    def stalled(self, quiet: float) -> Stall | None:
        running = [r for r in range(self.world_size) if r not in self.exits]
        if not running or any(self.pending[r] is None for r in running):
            return None  # someone is computing: wait for it
        if time.monotonic() - self.last_progress < quiet:
            return None
        return Stall({r: self.pending[r] for r in running}, list(self.order))


class JobWatch:
    """The same watch over a torchrun job: the workers of each attempt (attempt<K>/ under the job's
    folder), and its agents. Only the latest attempt can stall: earlier ones are over. An elastic job's
    attempts may have other world sizes: ``sizes`` holds each attempt's, the last for those after it."""

    def __init__(self, sizes: tuple[int, ...], folder: files.Folder, torchrun: list[bool]):
        self.sizes, self.folder = sizes, folder
        self.attempts: list[tuple[files.Folder, Watch]] = []
        self.agents: dict[int, int | None] = {}
        self.torchrun = torchrun  # for each agent, whether it runs torchrun (a rendezvous to wait for)
        self.since = time.monotonic()  # the last sign of progress: agents ready, an attempt began, a worker moved
        self.faults: list[dict] = []  # the planted faults that landed (ranks/faults.py)

    def discover(self):
        while len(self.attempts) < 64:
            sub = self.folder.sub(f"attempt{len(self.attempts)}")
            if sub is None:
                return
            self.attempts.append((sub, Watch(self.sizes[min(len(self.attempts), len(self.sizes) - 1)], sub)))
            self.since = time.monotonic()

    def idle(self) -> float:
        """Seconds the agents have been waiting for each other: since the last sign of progress, while
        every agent is up and no worker of the latest attempt runs. 0 otherwise. An agent still starting
        or a worker still importing torch is slow, not stuck: on a loaded machine either can take longer
        than any rendezvous should."""
        if not self._agents_up() or self._workers_alive():
            self.since = time.monotonic()
            return 0.0
        if self.attempts:
            self.since = max(self.since, self.attempts[-1][1].last_progress)
        return time.monotonic() - self.since

    def _agents_up(self) -> bool:
        """Every torchrun agent has started torchrun (host.agent_main marks it) or has ended."""
        return all(not torchrun or i in self.agents or self.folder.has(f"agent{i}.ready")
                   for i, torchrun in enumerate(self.torchrun))

    def _workers_alive(self) -> bool:
        """A worker of the latest attempt has started (its pid file is written first) and not ended."""
        if not self.attempts:
            return False
        sub, watch = self.attempts[-1]
        return any(r not in watch.exits and sub.has(f"rank{r}.pid") for r in range(watch.world_size))

    def take(self, message: dict):
        if isinstance(message.get("fault"), dict):
            self.faults.append(message["fault"])
        if "agent" in message and isinstance(message["agent"], int):
            code = message.get("code")
            self.agents[message["agent"]] = code if isinstance(code, int) else None
        if "exit" in message:
            self.since = time.monotonic()
            self.discover()
            attempt = message.get("attempt")
            if isinstance(attempt, int) and 0 <= attempt < len(self.attempts):
                self.attempts[attempt][1].exited(message["exit"], message.get("code"))

    def poll(self):
        self.discover()
        for _, watch in self.attempts:
            watch.poll()

    def running(self) -> list[int]:
        return self.attempts[-1][1].running() if self.attempts else []

    def stalled(self, quiet: float) -> Stall | None:
        return self.attempts[-1][1].stalled(quiet) if self.attempts else None

    def result(self) -> list[Attempt]:
        found = []
        for k, (sub, watch) in enumerate(self.attempts):
            ranks = [RankExit(r, watch.exits.get(r), sub.read_text(f"rank{r}.log"), sub.read_text(f"rank{r}.stack"),
                              watch.order.index(r) if r in watch.order else None) for r in range(watch.world_size)]
            digests = {r: tail.digest.hexdigest() for r, tail in watch.tails.items() if not tail.overflow}
            found.append(Attempt(k, sub, ranks, watch.events, digests, _duplicates(sub)))
        return found

    def close(self):
        """The tails closed; each attempt's folder stays open for what is read of it next (evidence.py)."""
        for _, watch in self.attempts:
            for tail in watch.tails.values():
                tail.close()


BATCH_IDLE = 30.0  # seconds a batch job may run with no worker, once one has run: longer than a requeue takes


def _discover_runs(runs: list, folder: files.Folder, world_size: int):
    """The folders of a batch job's runs (run<R>/, as the job's torchrun makes them) that have appeared."""
    while len(runs) < 8:
        sub = folder.sub(f"run{len(runs)}")
        if sub is None:
            return
        runs.append(JobWatch((world_size,), sub, [True]))


def _steps_of_rank0(watch: JobWatch) -> int:
    """The optimizer steps global rank 0 has taken in the run's attempts so far."""
    return sum(1 for _, w in watch.attempts for e in w.events.get(0, []) if e.get("kind") == "optimizer_step")


def _duplicates(folder: files.Folder) -> list[str]:
    """The workers that found their RANK taken in this attempt (ranks/worker.py), by the names of their marks."""
    found = [re.fullmatch(r"duplicate-rank(\d+)-agent(\d+)-\d+", name) for name in folder.names()]
    return [f"rank {m.group(1)}, agent {m.group(2)}" for m in found if m][:64]
