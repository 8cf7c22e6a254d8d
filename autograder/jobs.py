"""Launches under the real torchrun: what a job is, and what its agents and workers are given.

The exercises of lessons 1-3 fork their ranks from the rank host (launch.py). Lesson 4 teaches the
launcher itself, so its exercises run the student's script the way a user does: under plain
``python``, or under ``torchrun`` with its agent, its rendezvous and its restarts. The rank host
starts each agent (ranks/host.py, ``agent_main``): torchrun's own ``main()`` with the job's options,
whose entry point is ``ranks.worker``: that installs the trace in every worker of every attempt, then
runs the script. What the grader reads afterwards is the same as for a forked launch, once per
attempt (launch.Attempt, evidence.load).
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import dataclass, field

from autograder.launch import Layout, node_gpus


@dataclass(frozen=True)
class Job:
    """One launch of a script exercise under torchrun (or plain python), as its report names it."""

    name: str  # "torchrun, 2 processes": how the report names this launch
    world_size: int
    agents: tuple[tuple[str, ...] | None, ...] = (None,)  # torchrun's options for each agent; None: python
    args: tuple[str, ...] = ()  # the script's command line
    # A worker killed on purpose (ranks/faults.py): {"rank", "attempt", "when", "n"}; or, with "agent" for
    # "rank" and "lose": "machine", a machine lost: that agent and its workers killed at once.
    fault: dict | None = None
    # Its workers ask the host before going on after each step and save, as in a job with a fault, so that
    # a job without one looks the same to them (every job of an exercise that plants faults sets it).
    planted: bool = False
    nodes: int = 1
    env: dict = field(default_factory=dict)
    machines: tuple = ()  # the student's command for each agent, as torchrun read it (nodes.Node), if written
    meet_within: float = 20.0  # seconds the agents may run with no worker before their rendezvous is given up
    attempt_sizes: tuple[int, ...] = ()  # an elastic job's world size in each attempt (the last for those after)
    # A batch job on a Slurm of the sandbox's own (4.6): the student's sbatch script, run with the cell saved as
    # ``script_name`` beside it, preempted (scontrol requeue) once rank 0 has taken ``preempt_after`` steps.
    batch: str = ""
    script_name: str = "train.py"
    preempt_after: int = 0

    @property
    def restarts(self) -> bool:
        """Whether any agent may restart its workers (--max-restarts above 0)."""
        for options in self.agents:
            words = list(options or ())
            for k, word in enumerate(words):
                name, _, value = word.partition("=")
                if name.replace("_", "-") == "--max-restarts":
                    value = value or (words[k + 1] if k + 1 < len(words) else "0")
                    if value.strip().isdigit() and int(value) > 0:
                        return True
        return False

    @property
    def layout(self) -> Layout:
        return Layout(self.world_size, self.nodes)

    def request(self, script: str, backend: str) -> dict:
        """What the rank host needs to run this job (see ranks/host.py, op "job"); the fault, which the grader
        sends the host only once the job's processes are forked (launch.RankHost.job)."""
        env = {
            "AUTOGRADER_BACKEND": backend,
            "OMP_NUM_THREADS": "1",
            # Nothing in the work directory can stand in for ranks.worker (see ranks/worker.py).
            "PYTHONSAFEPATH": "1",
            # Each attempt of a job that restarts gets a store of its own: with a shared one, gloo workers of
            # a restarted group can find the last attempt's addresses and fail to connect (PyTorch 2.13). Only
            # there: elsewhere the workers meet in the agent's store, as under plain torchrun, so a script that
            # overwrites MASTER_ADDR or MASTER_PORT hangs here as it would there.
            **({"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"} if self.restarts else {}),
            "AUTOGRADER_PRELOAD": "torch._dynamo",  # see worker._preload
            **({"CUDA_VISIBLE_DEVICES": ""} if backend != "nccl" else {}),
            **self.env,
        }
        return {"agents": [list(a) if a is not None else None for a in self.agents], "script": script,
                "args": list(self.args), "env": env, "agent_env": self.agent_env(backend),
                "fault": self.fault, "planted": self.planted or self.fault is not None,
                "attempt_sizes": list(self.attempt_sizes)}

    def agent_env(self, backend: str) -> list[dict]:
        """What each agent adds to the job's environment: with nccl, each simulated node its own GPUs."""
        if backend != "nccl" or len(self.agents) < 2:
            return [{} for _ in self.agents]
        return [{"CUDA_VISIBLE_DEVICES": node_gpus(self.layout, k)} for k in range(len(self.agents))]


# What the rank host imports once for a torchrun job: the agents and the fork server (ranks/forkserver.py)
# are forked from it, so no agent, server or worker imports them again.
WARM_IMPORTS = ("torch.distributed.run", "torch._dynamo", "ranks.trace", "ranks.worker", "ranks.forkserver",
                "ranks.faults")

PYTHON = "python, 1 process"


def python(args: tuple[str, ...] = (), name: str = PYTHON) -> Job:
    """The script as `python SCRIPT ARGS`: one process, no launcher."""
    return Job(name, 1, (None,), args)


def standalone(world_size: int, args: tuple[str, ...] = (), *, restarts: int = 0, fault: dict | None = None,
               name: str = "", planted: bool = False) -> Job:
    """`torchrun --standalone --nproc-per-node=W`: one machine, a rendezvous on a port the system picks."""
    options = ("--standalone", f"--nproc-per-node={world_size}")
    if restarts:
        options += (f"--max-restarts={restarts}",)
    plural = "es" if world_size > 1 else ""
    return Job(name or f"torchrun, {world_size} process{plural}", world_size, (options,), args, fault,
               planted=planted)


def machines(count: int, per_machine: int, args: tuple[str, ...] = (), *, restarts: int = 0, name: str = "",
             planted: bool = False) -> Job:
    """One job of ``count`` agents, one per simulated machine, meeting by the c10d rendezvous on a port free
    now under an id of its own: what runs on one machine alone (LOCAL_RANK taken for RANK) shows here."""
    options = (f"--nnodes={count}", f"--nproc-per-node={per_machine}", "--rdzv-backend=c10d",
               f"--rdzv-endpoint={LOOPBACK}:{free_port()}", f"--rdzv-id=ddpcourse-{secrets.token_hex(4)}")
    if restarts:
        options += (f"--max-restarts={restarts}",)
    world = count * per_machine
    return Job(name or f"torchrun, {count} machines of {per_machine}", world, (options,) * count, args,
               planted=planted, nodes=count)


def elastic(count: int, args: tuple[str, ...] = (), *, name: str = "", lost_after: int | None = None) -> Job:
    """An elastic job, ``torchrun --nnodes=1:COUNT``, of ``count`` machines of one process each, meeting by the c10d
    rendezvous, which the first machine hosts. With ``lost_after``, the last machine is lost once its worker has
    taken that many optimizer steps: the survivors go on in a smaller group. Short rendezvous timeouts, so that a
    round forms in seconds: a lost agent is forgotten after 3 missed heartbeats of 1 s, then a last call of 3 s."""
    endpoint, rdzv_id = f"{LOOPBACK}:{free_port()}", f"ddpcourse-{secrets.token_hex(4)}"
    timeouts = "join_timeout=30,last_call_timeout=3,keep_alive_interval=1,keep_alive_max_attempt=3"

    def options(host: bool) -> tuple[str, ...]:
        return (f"--nnodes=1:{count}", "--nproc-per-node=1", "--max-restarts=3", "--rdzv-backend=c10d",
                f"--rdzv-endpoint={endpoint}", f"--rdzv-id={rdzv_id}", f"--rdzv-conf={timeouts},is_host={int(host)}")
    fault = None if lost_after is None else {"agent": count - 1, "attempt": 0, "when": "step", "n": lost_after,
                                             "lose": "machine"}
    return Job(name or f"torchrun, {count} machines of 1 process (--nnodes=1:{count})", count,
               tuple(options(k == 0) for k in range(count)), args, fault, planted=True, nodes=count,
               attempt_sizes=(count,) if fault is None else (count, count - 1))


LOOPBACK = "127.0.0.1"  # every simulated machine's address


def free_port() -> int:
    """A port no process listens on now, for one job's rendezvous (never a fixed one)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def from_commands(machines, world_size: int, args: tuple[str, ...] = (), name: str = "") -> Job:
    """One job of one agent per machine, each run with the options the student wrote (nodes.py);
    the grader's ``args`` come after the student's own script arguments, so that they hold."""
    return Job(name or f"{len(machines)} machines", world_size, tuple(m.options for m in machines),
               tuple(machines[0].script_args) + tuple(args), nodes=len(machines), machines=tuple(machines))
