"""A Slurm of the submission's own, inside its sandbox: a controller and two nodes, and one batch job on it.

Exercise 4.6 hands the student's ``sbatch`` script to a real Slurm. Nothing the job does may reach
the grader, another submission or a cluster they share, so the rank host starts one inside the
sandbox, for this grading alone: ``munged``, ``slurmctld`` and a ``slurmd`` for each of the nodes
n1 and n2, all as the sandbox's unprivileged user (``SlurmUser``), on addresses of the sandbox's own
network namespace (the sandbox gives its loopback these two addresses, and /etc/hosts their names).
Everything it writes is under the grading's work directory, and everything it runs dies with the
sandbox.

The job's ``torchrun`` is the grader's (``agent_main``, which the grader puts first on the job's
PATH, as ``torchrun`` and as ``python -m torch.distributed.run``): the real torchrun, whose workers
run ``ranks.worker`` and so are traced as in every other exercise, each Slurm run of the job in a
folder of its own (``run<SLURM_RESTART_COUNT>/attempt<K>/``), with a record of the agent's command
line and Slurm's variables beside them.

The grader drives the job (launch.RankHost.batch): it asks for the preemption once the first run
has trained a number of steps; the host then does what a scheduler's preemption with requeue does,
``scontrol requeue`` (SIGTERM to every process of the job, SIGKILL ``KillWait`` seconds later, back in
the queue), and lets the job start again at once. A job that did not ask to be requeued is cancelled
instead, as a preemption does, and submitted again, as its user would: its second run is judged too.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ranks.host import _alive, _read_small

KILL_WAIT = 5  # seconds between a preempted job's SIGTERM and its SIGKILL
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE",
         "PREEMPTED")
PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])


class Cluster:
    """The controller and the nodes the grader named (``names``: "nodes" -> address, "controller", "user"),
    configured and run under ``home``."""

    def __init__(self, home: Path, names: dict):
        self.home = home
        self.nodes, self.controller, self.user = dict(names["nodes"]), names["controller"], names["user"]
        self.conf = home / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), "PATH": PATH}

    def start(self, timeout: float = 30.0) -> str:
        """Start the daemons and wait for both nodes to be idle; "" or what went wrong."""
        for sub in ("state", "log", "spool/n1", "spool/n2", "run", "munge"):
            (self.home / sub).mkdir(parents=True, exist_ok=True)
        (self.home / "munge").chmod(0o711)  # munged refuses a socket directory others may write to
        key = self.home / "munge" / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        self.conf.write_text(self.configuration())
        munge = self.home / "munge"
        started = [self.run("munged", f"--key-file={key}", f"--socket={munge}/munge.socket",
                            f"--pid-file={munge}/munged.pid", f"--log-file={self.home}/log/munged.log",
                            f"--seed-file={munge}/munge.seed", "--force"),
                   self.run("slurmctld", "-f", str(self.conf)),
                   *(self.run("slurmd", "-f", str(self.conf), "-N", node) for node in self.nodes)]
        for name, (code, _, err) in zip(("munged", "slurmctld", *(f"slurmd {n}" for n in self.nodes)), started):
            if code != 0:
                return f"{name} did not start: {err.strip()[-500:] or f'exit code {code}'}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            idle = self.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N")[1].split()
            if set(idle) >= set(self.nodes):
                return ""
            time.sleep(0.25)
        return f"the nodes were not up after {timeout:.0f} s ({self.tail('slurmctld.log')})"

    def configuration(self) -> str:
        home = self.home
        cpus = os.cpu_count() or 2
        nodes = "\n".join(f"NodeName={name} NodeHostname={name} NodeAddr={address} Port={6818 + k} "
                          f"CPUs={cpus} RealMemory=4000 State=UNKNOWN" for k, (name, address) in enumerate(self.nodes.items()))
        first = next(iter(self.nodes.values()))
        return f"""ClusterName=sandbox
SlurmctldHost={self.controller}({first})
SlurmctldPort=6817
SlurmUser={self.user}
SlurmdUser={self.user}
AuthType=auth/munge
AuthInfo=socket={home}/munge/munge.socket
CredType=cred/munge
StateSaveLocation={home}/state
SlurmdSpoolDir={home}/spool/%n
SlurmctldPidFile={home}/run/slurmctld.pid
SlurmdPidFile={home}/run/slurmd-%n.pid
SlurmctldLogFile={home}/log/slurmctld.log
SlurmdLogFile={home}/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobAcctGatherType=jobacct_gather/none
JobRequeue=0
InactiveLimit=0
KillWait={KILL_WAIT}
MinJobAge=600
SlurmdTimeout=30
{nodes}
PartitionName=course Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""

    def run(self, *command: str, env: dict | None = None, timeout: float = 20.0) -> tuple[int, str, str]:
        try:
            done = subprocess.run(command, capture_output=True, text=True, env=env or self.env, timeout=timeout,
                                  stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return 1, "", str(exc)
        return done.returncode, done.stdout, done.stderr

    def tail(self, log: str) -> str:
        try:
            return " / ".join((self.home / "log" / log).read_text(errors="replace").splitlines()[-3:])
        except OSError:
            return f"no {log}"


class Batch:
    """One batch job on the sandbox's Slurm, from its submission to its end (the host's op "slurm")."""

    def __init__(self, request: dict, say):
        self.say = say
        self.workdir, self.cwd = Path(request["workdir"]), Path(request["cwd"])
        self.request = request
        self.cluster = Cluster(self.workdir / "slurm", request["cluster"])
        self.job = ""
        self.wants_start = False  # requeued: start it again as soon as it is pending
        self.resubmit = False  # cancelled by the preemption: submit it again once its workers are gone
        self.ended_at: float | None = None
        self.state = ""
        self.last_poll = 0.0
        self.workers: dict[tuple[int, int, int], int] = {}  # (run, attempt, rank) -> pid
        self.told: set[tuple[int, int, int]] = set()

    def start(self) -> bool:
        """The cluster up and the job submitted; False (and said why) if either failed."""
        problem = self.cluster.start()
        if problem:
            self.say(slurm={"error": f"the sandbox's Slurm did not start: {problem}"})
            return False
        (self.cwd / "job.sh").write_text(self.request["batch"])
        shutil.copyfile(self.request["script"], self.cwd / self.request["name"])
        return self.submit()

    def submit(self, again: bool = False) -> bool:
        """sbatch the job; ``again``: as its user would after a preemption cancelled it (its runs go on counting)."""
        env = {**self.cluster.env, **{str(k): str(v) for k, v in self.request.get("env", {}).items()},
               "PATH": f"{self.request['bin']}{os.pathsep}{self.cluster.env['PATH']}",
               "AUTOGRADER_SUBMISSION": str(int(again))}
        code, out, err = self.cluster.run("sbatch", "--parsable", f"--chdir={self.cwd}",
                                          f"--output={self.workdir}/batch.out", "--open-mode=append",
                                          "--export=ALL", str(self.cwd / "job.sh"), env=env)
        self.job = out.strip().split(";")[0]
        if code != 0 or not self.job.isdigit():
            self.say(slurm={"error": f"sbatch refused the batch script: {err.strip()[-1000:] or out.strip()[-1000:]}"})
            return False
        self.say(slurm={"job": self.job})
        return True

    def poll(self) -> bool:
        """Watch the job; True once it has ended, its workers with it (all said)."""
        now = time.monotonic()
        if now - self.last_poll < 0.25:
            return False
        self.last_poll = now
        running = self.scan()
        fields = self.show()
        self.state = fields.get("JobState", self.state)
        if self.wants_start and self.state == "PENDING":
            self.cluster.run("scontrol", "update", f"JobId={self.job}", "StartTime=now")
            self.wants_start = False
        if self.state not in FINAL or self.wants_start:
            self.ended_at = None
            return False
        if self.resubmit and not running:
            self.resubmit = False
            return not self.submit(again=True)
        self.ended_at = self.ended_at or now
        if running and now - self.ended_at < 3.0:
            return False  # the workers of a job that ended are about to be seen ending
        self.say(slurm={"state": self.state, "restarts": fields.get("Restarts"), "requeue": fields.get("Requeue"),
                        "exit": fields.get("ExitCode")})
        return True

    def show(self) -> dict[str, str]:
        code, out, _ = self.cluster.run("scontrol", "show", "job", "-o", self.job)
        return dict(re.findall(r"(\w+)=(\S*)", out)) if code == 0 else {}

    def preempt(self):
        """As a preemption with requeue: SIGTERM to the whole job, SIGKILL after KillWait, back in the queue."""
        code, out, err = self.cluster.run("scontrol", "requeue", self.job)
        self.say(preempted={"ok": code == 0, "said": (err or out).strip()[-500:]})
        self.wants_start = code == 0
        if code != 0:  # not requeueable: the preemption cancels it, and its user submits it again
            self.cluster.run("scancel", self.job)
            self.resubmit = True

    def scan(self) -> bool:
        """Say each worker that ended (every run, every attempt); True while one runs."""
        running = False
        for path in self.workdir.glob("run*/attempt*/rank*.pid"):
            try:
                key = (int(path.parent.parent.name[3:]), int(path.parent.name[7:]), int(path.stem[4:]))
                self.workers.setdefault(key, int(_read_small(path) or "0"))
            except ValueError:
                continue
        for key, pid in self.workers.items():
            if key in self.told:
                continue
            if pid and _alive(pid):
                running = True
                continue
            self.told.add(key)
            folder = self.workdir / f"run{key[0]}" / f"attempt{key[1]}"
            code = _read_small(folder / f"rank{key[2]}.exit")
            self.say(exit=key[2], attempt=key[1], run=key[0],
                     code=int(code) if code and code.strip().lstrip("-").isdigit() else None)
        return running

    def stop(self):
        if self.job:
            self.cluster.run("scancel", self.job)


# The job's torchrun: what `torchrun ...` and `python -m torch.distributed.run ...` start in the job.

def agent_main(argv: list[str], config: str):
    """One srun task's torchrun agent: its command line and Slurm's variables recorded, then torchrun's own
    main() with the same options, its workers running ranks.worker (traced) and the grader's arguments last."""
    settings = json.loads(Path(config).read_text())
    run = int(os.environ.get("SLURM_RESTART_COUNT") or 0) + int(os.environ.get("AUTOGRADER_SUBMISSION") or 0)
    trace = Path(settings["trace"]) / f"run{run}"
    trace.mkdir(exist_ok=True)
    task = os.environ.get("SLURM_PROCID", "0")
    record = {"argv": argv[:200], "pid": os.getpid(), "run": run,
              **{name: os.environ.get(name) for name in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURMD_NODENAME",
                                                       "SLURM_NODEID", "SLURM_PROCID", "SLURM_LOCALID",
                                                       "SLURM_STEP_ID", "SLURM_RESTART_COUNT")}}
    (trace / f"agent-{task}-{os.getpid()}.json").write_text(json.dumps(record))
    from torch.distributed.run import get_args_parser, main as torchrun

    try:
        parsed = get_args_parser().parse_args(argv)
    except SystemExit:
        torchrun(argv)  # torchrun itself says what is wrong with the command line
        return
    script_args = list(parsed.training_script_args)
    options = argv[:len(argv) - len(script_args) - 1]
    if parsed.module or parsed.no_python:
        torchrun(argv)  # not a script: run untraced, as written
        return
    _named_as_the_node(os.environ.get("SLURMD_NODENAME"))
    os.environ.update(AUTOGRADER_TRACE=str(trace), AUTOGRADER_AGENT=task, AUTOGRADER_AGENT_PID=str(os.getpid()))
    sys.argv = ["torchrun", *argv]
    torchrun([*options, "-m", "ranks.worker", parsed.training_script, *script_args, *settings["args"]])


def _named_as_the_node(node: str | None):
    """The agent's machine named as its node: both nodes are the sandbox, but on a cluster each is a machine of
    its own name, and torchrun's c10d rendezvous hosts its store on the agent whose machine the endpoint names."""
    if not node:
        return
    import socket

    fqdn = socket.getfqdn
    socket.gethostname = lambda: node
    socket.getfqdn = lambda name="": node if name in ("", node) else fqdn(name)


def python_main(argv: list[str], config: str):
    """`python ...` in the job: `-m torch.distributed.run` is the traced torchrun, anything else the real python."""
    if argv[:2] in (["-m", "torch.distributed.run"], ["-m", "torchrun"]):
        agent_main(argv[2:], config)
        return
    os.execv(sys.executable, [sys.executable, *argv])
