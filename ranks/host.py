"""The rank host: the one process that starts a submission's ranks, inside the sandbox.

The grader never runs a submission's code in its own memory. It starts this host instead, by
absolute path in Python's isolated mode (``python -I -c BOOT``, see the grader's launch.py), wrapped
in the sandbox when there is one, and talks to it with JSON lines: requests on the host's stdin,
answers on its stdout.

    {"op": "prepare", "imports": [...]}          import what the ranks will need, once
    {"op": "launch", "workdir", "environments", "backend", "target", "limits"}
        one rank per entry of "environments" (torchrun's variables for it, all but the rendezvous port)
        -> {"started": pids}, then {"exit": rank, "code": c} as each rank ends, then {"done": true}
    {"op": "stop", "stacks": [ranks]}            ask those ranks for their Python stack, then kill all
    {"op": "export", "path", "out", "within"}    read a checkpoint a rank saved, write it as plain data (export.py)
    {"op": "job", "workdir", "cwd", "agents", "script", "args", "env", "agent_env", "planted", "limits"}
        a torchrun job: one agent per entry of "agents" (torchrun's options; None: the script under
        plain python), each forked from here with "env" and its entry of "agent_env" and running
        torchrun's own main(); the workers are forked from a fork server of the job (forkserver.py),
        and with "planted" each asks this host before going on after a step or a save (faults.py)
        -> {"started": pids}, then {"exit": rank, "attempt": k, "code": c} as each worker ends,
           {"agent": i, "code": c} as each agent ends, {"fault": {...}} if the fault landed, then {"done": true}
    {"op": "plant", "fault": {"rank" or "agent", "attempt", "when", "n", "lose"}}   the job's fault, once all is forked
    {"op": "slurm", "workdir", "cwd", "batch", "script", "name", "bin", "env", "cluster"}
        a batch job on a Slurm of the sandbox's own (slurm.py): -> {"slurm": {"job"}} or {"slurm": {"error"}},
        {"exit": rank, "attempt": k, "run": r, "code": c} as each worker of each run ends, {"preempted": {...}},
        {"slurm": {"state", "restarts", ...}} when it ends, then {"done": true}
    {"op": "preempt"}                            that batch job preempted, and requeued if it may be

The host has imported torch once, so each rank is *forked* from it in a few milliseconds.
A forked rank leads a process group of its own and dies with the host; keeps none of the host's
descriptors to the grader; sends its output to ``rank<N>.log`` and its Python stack to
``rank<N>.stack`` on SIGUSR1; sets the variables torchrun sets; runs the target; and leaves with
``os._exit``. The host is not dumpable, nor are the agents and the fork server it forks, so no rank
can trace them or read their memory; the ranks and workers are, as any process is.

Nothing the host says is trusted: it runs beside the submission, which can kill it. The grader only
takes the exit codes from it to explain failures, and reads what the ranks recorded as capped
plain data.
"""

from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
EXIT_CODE_GRACE = 0.5  # seconds


def main(argv: list[str]) -> int:
    _prctl(PR_SET_DUMPABLE, 0)  # no rank may ptrace this process, or read its memory or descriptors
    sys.stdout.write(json.dumps({"hello": os.getpid()}) + "\n")  # started: the sandbox works
    sys.stdout.flush()
    sandboxed = "--sandboxed" in argv
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if not sandboxed:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)  # orphans of the ranks come back to us, to be killed
    import torch

    torch.set_num_threads(1)  # ranks are forked from here; keep OpenMP out of the parent
    out = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # nothing printed by an import may break the protocol
    os.close(null)
    host = Host(out, sandboxed)
    host.serve(sys.stdin.buffer)
    return 0


_GRADERS: list[int] = []  # the host's descriptors to the grader: no child of the host keeps them


class Host:
    def __init__(self, out, sandboxed: bool):
        self.out = out
        _GRADERS.append(out.fileno())
        self.sandboxed = sandboxed
        self.ranks: dict[int, int] = {}  # pid -> rank, for the launch in progress
        self.workdir: Path | None = None
        self.agents: dict[int, int] = {}  # pid -> agent index, for the job in progress
        self.forkserver = 0  # the job's fork server (forkserver.py), while the job runs
        self.plan = None  # the job's fault to plant and its workers' lines (faults.py), while the job runs
        self.workers: dict[tuple[int, int], int] = {}  # (attempt, rank) -> pid, of the job in progress
        self.uncoded: dict[tuple[int, int], float] = {}  # workers seen ended with no exit code yet -> since when
        self.last_scan = 0.0
        self.batch = None  # the batch job on the sandbox's own Slurm (slurm.py), while it runs

    def say(self, **message):
        self.out.write(json.dumps(message) + "\n")

    def serve(self, requests):
        fd, pending = requests.fileno(), b""
        while True:
            # Read the descriptor itself: a buffered readline could take two requests at once and
            # leave the second where select() never sees it.
            lines = self.plan.sockets() if self.plan else []
            busy = self.ranks or self.agents or self.batch
            ready, _, _ = select.select([fd, *lines], [], [], 0.005 if busy else None)
            for sock in (s for s in ready if s is not fd):
                self.plan.ready(sock)
            if fd in ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    if line.strip():
                        self.handle(json.loads(line))
            self.reap()
            self.reap_job()
            if self.batch is not None and self.batch.poll():
                self.end_batch()
        self.kill_all()

    def handle(self, request: dict):
        op = request.get("op")
        try:
            if op == "prepare":
                import importlib

                for name in request.get("imports", []):
                    try:
                        importlib.import_module(name)
                    except ImportError:
                        pass  # not warm: the ranks that need it import it, and say why it fails
                self.say(prepared=True)
            elif op == "launch":
                self.launch(request)
            elif op == "stop" and self.batch is not None:
                self.batch.stop()
                self.end_batch()
            elif op == "stop":
                self.stop(request.get("stacks", []))
            elif op == "slurm":
                from ranks.slurm import Batch

                self.batch = Batch(request, self.say)
                if not self.batch.start():
                    self.end_batch()
            elif op == "preempt" and self.batch is not None:
                self.batch.preempt()
            elif op == "job":
                self.job(request)
            elif op == "plant" and self.plan is not None:
                self.plan.fault = request.get("fault")
            elif op == "export":
                from ranks.export import export

                self.say(exported=export(request["path"], Path(request["out"]), request.get("within")))
        except Exception:
            self.say(host_error=traceback.format_exc()[-4000:])

    def launch(self, request: dict):
        from ranks.target import make_target

        workdir = Path(request["workdir"])
        environments = request["environments"]
        target = make_target(request["target"])
        port_pipes = {}
        sys.stdout.flush()
        for rank, environment in enumerate(environments):
            read_end, write_end = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(write_end)
                rank_main(target, rank, environment, workdir, read_end, request)  # never returns
            os.close(read_end)
            try:
                os.setpgid(pid, pid)  # the child does the same; whichever runs first wins
            except (PermissionError, ProcessLookupError):
                pass
            self.ranks[pid], port_pipes[rank] = rank, write_end
        import torch

        self.store = torch.distributed.TCPStore("127.0.0.1", 0, len(environments), is_master=True,
                                                wait_for_workers=False)
        for fd in port_pipes.values():
            os.write(fd, f"{self.store.port}\n".encode())
            os.close(fd)
        self.workdir = workdir
        self.say(started={str(rank): pid for pid, rank in self.ranks.items()})

    def reap(self):
        for pid, rank in list(self.ranks.items()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                del self.ranks[pid]
                self.say(exit=rank, code=os.waitstatus_to_exitcode(status), t=time.time())
                if not self.ranks:
                    self.finish()

    def end_batch(self):
        """The batch job over: its cluster and whatever it left killed (the whole namespace), then done."""
        self.batch = None
        self.finish()

    def finish(self):
        self.kill_strays()
        self.store = None
        self.workers = {}
        self.say(done=True)

    def job(self, request: dict):
        self.workdir = Path(request["workdir"])
        self.workers, self.uncoded, self.last_scan = {}, {}, 0.0
        sys.stdout.flush()
        handing = None
        if any(options is not None for options in request["agents"]):
            request["forkserver"] = f"ranks-{os.getpid()}-{os.urandom(8).hex()}"
            if request.get("planted"):  # the grader plants a fault once all is forked ("plant")
                from ranks.faults import Plan, handing_pair

                ours, handing = handing_pair()
                self.plan = Plan(ours, self.say, self.lose_agent)
            self.forkserver = os.fork()
            if self.forkserver == 0:
                forkserver_main(request, handing)  # never returns
            if handing is not None:
                handing.close()
        for index, options in enumerate(request["agents"]):
            pid = os.fork()
            if pid == 0:
                agent_main(index, options, request)  # never returns
            try:
                os.setpgid(pid, pid)
            except (PermissionError, ProcessLookupError):
                pass
            self.agents[pid] = index
        self.say(started={str(index): pid for pid, index in self.agents.items()})

    def lose_agent(self, index: int):
        """Agent ``index`` killed, as its machine's loss kills it (faults.py kills its workers); reaped as any."""
        for pid, agent in list(self.agents.items()):
            if agent == index:
                _signal(-pid, signal.SIGKILL)
                _signal(pid, signal.SIGKILL)

    def reap_job(self):
        if not self.agents and not self.workers:
            return
        now = time.monotonic()
        if now - self.last_scan > 0.05:
            self.last_scan = now
            self.scan_workers()
        for pid, index in list(self.agents.items()):
            try:
                done, status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done, status = pid, 0
            if done:
                del self.agents[pid]
                self.say(agent=index, code=os.waitstatus_to_exitcode(status), t=time.time())
        if not self.agents:
            deadline = time.monotonic() + 2.0  # workers die with their agent: let their ends be seen
            while self.scan_workers() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.kill_job()
            self.finish()

    def scan_workers(self) -> bool:
        """Learn the workers that started (their pid files) and report those that ended; True while some run."""
        for path in self.workdir.glob("attempt*/rank*.pid"):
            try:
                key = (int(path.parent.name.removeprefix("attempt")), int(path.stem.removeprefix("rank")))
                if key not in self.workers:
                    self.workers[key] = int(_read_small(path))
            except (OSError, ValueError, TypeError):
                continue
        running = False
        for (attempt, rank), pid in list(self.workers.items()):
            if pid and _alive(pid):
                running = True
                continue
            code = _exit_code(self.workdir / f"attempt{attempt}" / f"rank{rank}.exit") if pid else None
            if pid and code is None and self._may_still_get_a_code((attempt, rank)):
                running = True
                continue
            self.workers[(attempt, rank)] = 0  # reported
            if pid:
                self.say(exit=rank, attempt=attempt, code=code)
        return running

    def _may_still_get_a_code(self, key: tuple[int, int]) -> bool:
        """A worker the fork server forked, killed by a crash, gets its exit code from the server just after the
        server reaps it: it is waited for a moment before the worker is told as killed by a signal."""
        since = self.uncoded.setdefault(key, time.monotonic())
        return time.monotonic() - since < EXIT_CODE_GRACE

    def kill_job(self):
        mine = set(_descendants(os.getpid()))
        for pid in list(self.agents):
            _signal(-pid, signal.SIGKILL)
        for pid in [p for p in self.workers.values() if p in mine] + list(self.agents):
            _signal(pid, signal.SIGKILL)
        if self.forkserver:
            _signal(self.forkserver, signal.SIGKILL)
            try:
                os.waitpid(self.forkserver, 0)
            except ChildProcessError:
                pass
            self.forkserver = 0
        if self.plan is not None:
            self.plan.close()
            self.plan = None
        while self.agents:
            for pid, index in list(self.agents.items()):
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                del self.agents[pid]
                self.say(agent=index, code=None)
        self.scan_workers()

    def stop(self, stacks: list[int]):
        if self.agents:
            return self.stop_job(stacks)
        wanted = {pid: rank for pid, rank in self.ranks.items() if rank in stacks}
        for pid in wanted:
            _signal(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 1.0
        while wanted and time.monotonic() < deadline and not all(
                _size(self.workdir / f"rank{rank}.stack") for rank in wanted.values()):
            time.sleep(0.02)
        time.sleep(0.05)  # let the last dump finish writing
        self.kill_all()

    def stop_job(self, stacks: list[int]):
        """Stacks from the latest attempt's workers that still run, then the whole job killed."""
        self.scan_workers()
        latest = max((a for a, _ in self.workers), default=0)
        mine = set(_descendants(os.getpid()))
        wanted = {pid: rank for (attempt, rank), pid in self.workers.items()
                  if attempt == latest and rank in stacks and pid in mine}
        for pid in wanted:
            _signal(pid, signal.SIGUSR1)
        folder = self.workdir / f"attempt{latest}"
        deadline = time.monotonic() + 1.0
        while wanted and time.monotonic() < deadline and not all(
                _size(folder / f"rank{rank}.stack") for rank in wanted.values()):
            time.sleep(0.02)
        time.sleep(0.05)
        self.kill_job()
        self.finish()

    def kill_all(self):
        if self.agents:
            self.kill_job()
        for pid in self.ranks:
            _signal(-pid, signal.SIGKILL)
            _signal(pid, signal.SIGKILL)
        while self.ranks:
            self.reap()
            time.sleep(0.002)

    def kill_strays(self):
        """Whatever the ranks started and left behind: setsid'd children, daemons, orphans."""
        if self.sandboxed:
            _signal(-1, signal.SIGKILL)  # our own PID namespace: everything but us and its init
            deadline = time.monotonic() + 2.0  # gone, not only signalled, before the launch is said to be over
            while _others_in_namespace() and time.monotonic() < deadline:
                self._reap_any()
                time.sleep(0.01)
        else:
            for pid in _descendants(os.getpid()):
                _signal(pid, signal.SIGKILL)
        self._reap_any()

    def _reap_any(self):
        """Reap whatever of ours has ended (what was reparented to us too)."""
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def rank_main(target, rank: int, environment: dict, workdir: Path, port_fd: int, request: dict):
    code = 1
    try:
        _child_start(request.get("limits", {}), request.get("backend", "gloo"))
        _prctl(PR_SET_DUMPABLE, 1)  # as any process: the ranks may trace each other (nccl's IPC does), never the host
        output_to(workdir / f"rank{rank}.log")
        stack_file = open(workdir / f"rank{rank}.stack", "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
        faulthandler.enable(file=sys.stderr, all_threads=False)  # a fatal signal leaves its stack in the log
        port = int(os.read(port_fd, 64).decode().strip() or 0)
        os.close(port_fd)
        os.environ.update({str(k): str(v) for k, v in environment.items()})
        os.environ.update(MASTER_PORT=str(port), TORCHELASTIC_RUN_ID=f"ranks-{os.getppid()}-{port}")
        os.chdir(workdir)
        import torch

        torch.set_num_threads(1)
        target()
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def agent_main(index: int, options: list[str] | None, request: dict):
    """One agent of a job, in a child of the host: torchrun's own main() with ``options``, its entry
    point ranks.worker; or, with no options, the worker itself: the script under plain python."""
    code = 1
    try:
        _child_start(request.get("limits", {}), request.get("env", {}).get("AUTOGRADER_BACKEND", "gloo"))
        output_to(Path(request["workdir"]) / f"agent{index}.log")
        os.environ.update({str(k): str(v) for k, v in request.get("env", {}).items()})
        os.environ.update({str(k): str(v) for k, v in request["agent_env"][index].items()})
        os.environ["AUTOGRADER_TRACE"] = request["workdir"]
        os.environ["AUTOGRADER_AGENT"] = str(index)  # which machine a worker belongs to
        if request.get("forkserver"):
            os.environ["AUTOGRADER_FORKSERVER"] = request["forkserver"]
        os.chdir(request["cwd"])
        entry = [str(request["script"]), *map(str, request.get("args", []))]
        if options is None:
            from ranks import worker

            worker.main(entry)  # ends this process
        from torch.distributed.run import main as torchrun

        # From here the agent only waits for its peers: the grader's rendezvous clock starts (launch.JobWatch).
        Path(request["workdir"], f"agent{index}.ready").touch()
        os.environ["AUTOGRADER_AGENT_PID"] = str(os.getpid())  # the parent every worker must find (worker.py)

        sys.argv = ["torchrun", *options, "-m", "ranks.worker", *entry]
        torchrun([*options, "-m", "ranks.worker", *entry])
        code = 0
    except SystemExit as exc:
        code = exit_code(exc)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def forkserver_main(request: dict, handing):
    """The job's fork server, in a child of the host: torch and what the workers preload imported once,
    each worker forked from here (forkserver.py); with ``handing``, each with a line to the host (faults.py)."""
    try:
        _child_start(request.get("limits", {}), request.get("env", {}).get("AUTOGRADER_BACKEND", "gloo"))
        output_to(Path(request["workdir"]) / "forkserver.log")
        os.environ.update({str(k): str(v) for k, v in request.get("env", {}).items()})
        sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]  # PYTHONSAFEPATH, as for any worker
        from ranks import forkserver, trace, worker  # noqa: F401 (trace: imported once, here)

        listener = forkserver.listen(request["forkserver"])
        worker.preload()
        forkserver.serve(listener, lambda asked: worker.become(asked["argv"], asked.get("line")), handing)
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(1)


def _child_start(limits: dict, backend: str):
    """A rank or an agent, just forked: a process group of its own, dead with the host, default
    signal handling, the limits, and no way to the grader: the host's stdin carries the grader's
    requests, and its answers go out through a descriptor of its own, closed here."""
    os.setpgid(0, 0)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd in _GRADERS:
        try:
            os.close(fd)
        except OSError:
            pass
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _limit(limits, backend)


def output_to(path: Path):
    """This process's stdout and stderr (descriptors and Python streams) into ``path``, line-buffered."""
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def exit_code(exc: SystemExit) -> int:
    """The exit status sys.exit(code) asks for."""
    return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)


def _alive(pid: int) -> bool:
    """Running, and not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def _exit_code(path: Path) -> int | None:
    """The exit code a worker wrote as it ended by itself; None if it did not (a signal ended it)."""
    try:
        return int(_read_small(path))
    except (ValueError, TypeError):
        return None


def _read_small(path: Path, limit: int = 20) -> str | None:
    """The first bytes of a regular file a worker wrote, never waiting on a pipe or following a link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        import stat

        return os.read(fd, limit).decode(errors="replace") if stat.S_ISREG(os.fstat(fd).st_mode) else None
    finally:
        os.close(fd)


def _limit(limits: dict, backend: str):
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if limits.get("file_mb"):
        size = int(limits["file_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if limits.get("memory_mb") and backend != "nccl":  # CUDA reserves far more address space than it uses
        size = int(limits["memory_mb"]) << 20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    if limits.get("processes"):
        n = int(limits["processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))


def _others_in_namespace() -> bool:
    """Inside the sandbox's PID namespace: a process other than its init (bwrap) and this host still exists."""
    mine = {1, os.getpid()}
    return any(entry.isdigit() and int(entry) not in mine for entry in os.listdir("/proc"))


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def _prctl(option: int, value: int):
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)
    except OSError:
        pass  # not Linux: the grader's own cleanup still kills every rank


def _signal(pid: int, sig: int):
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
