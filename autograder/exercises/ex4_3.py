"""Exercise 4.3: two machines on one, graded by running the student's own launch commands.

The cell is a training script that also names, in ``NODE_COMMANDS``, the command that starts it on
each of two machines. The script handed out is correct on one machine (it passes 4.1) and wrong on
two: it gives the sampler LOCAL_RANK and lets every LOCAL_RANK 0 save. The grader reads the
commands without running any of the cell (nodes.py), sets $HEAD, $PORT and $JOB_ID, and starts one
torchrun agent per command, both at once, as two machines would: one job of 2 x 2 workers, or,
with a mistake in the commands, a rendezvous that never forms (stopped and said in seconds) or two
jobs of their own.
"""

from __future__ import annotations

import secrets

from autograder import jobs, nodes
from autograder.checks import Check, params_identical_across_ranks, runs_to_the_end
from autograder.exercises import Exercise
from autograder.exercises.ex4_1 import ARGS, _destroyed, _file_holds_the_trained_model, _gpu_of_the_local_rank, \
    _one_writer, _own_share_of_the_data, _same_model_every_launch, _work, place
from autograder.reference import flat
from ddpcourse import make_model

MACHINES, PER_MACHINE = 2, 2
WORLD = MACHINES * PER_MACHINE
HEAD = jobs.LOOPBACK


def job_of(code: str) -> tuple[jobs.Job, ...]:
    """The cell's commands, run as one job on a port free now and with an id of its own."""
    values = {"HEAD": HEAD, "PORT": str(jobs.free_port()), "JOB_ID": f"ddpcourse-{secrets.token_hex(4)}"}
    machines = nodes.read(code, MACHINES, values)
    return (jobs.from_commands(machines, WORLD, ARGS, name=f"{MACHINES} machines x {PER_MACHINE} workers"),)


def _apart(world) -> str:
    """What in the commands keeps the machines apart, or a pointer to what to compare."""
    reasons = nodes.why_apart(list(world.plan.machines)) if world.plan is not None else []
    if reasons:
        return " In your commands: " + "; ".join(reasons) + "."
    if _per_machine(world):
        return ""
    return (" Compare the two commands: --nnodes, the rendezvous (backend, endpoint, id) and the script must be "
            "the same on both machines")


def _per_machine(world) -> str:
    """What the commands asked of --nproc-per-node, if it is not PER_MACHINE on every machine."""
    machines = list(world.plan.machines) if world.plan is not None else []
    asked = [m.get("nproc_per_node") for m in machines]
    if not machines or asked == [str(PER_MACHINE)] * MACHINES:
        return ""
    return (" --nproc-per-node is the number of workers on each machine: "
            + ", ".join(f"machine {m.index} says {m.get('nproc_per_node')}" for m in machines) + ".")


def _one_job(runs):
    for world in runs:
        workers = [(r, (r.first("worker") or {}).get("env") or {}) for r in world.ranks if r.first("worker")]
        if world.duplicates:
            return (f"{world.label}: the two agents formed separate jobs, each numbering its workers from 0 "
                    f"({world.duplicates[0]} found its RANK taken).{_apart(world)}")
        if world.unmet is not None:
            return (f"{world.label}: the agents waited {world.unmet:.0f} s for each other and never formed a job: "
                    f"no rendezvous.{_apart(world)}")
        sizes = sorted({env.get("WORLD_SIZE") for _, env in workers}, key=str)
        if sizes != [str(WORLD)]:
            return (f"{world.label}: the workers were told WORLD_SIZE {', '.join(map(str, sizes)) or 'nothing'}, "
                    f"not {WORLD}: one job of {MACHINES} machines x {PER_MACHINE} workers.{_per_machine(world)}"
                    f"{_apart(world)}")
        by_agent: dict[str, list] = {}
        for r, env in workers:
            by_agent.setdefault(env.get("AUTOGRADER_AGENT"), []).append((r, env))
        for agent, found in sorted(by_agent.items(), key=lambda kv: str(kv[0])):
            if len(found) != PER_MACHINE:
                return (f"{world.label}: machine {agent} started {len(found)} worker(s): "
                        f"--nproc-per-node={PER_MACHINE} on each machine")
            locals_ = sorted(place(world, r)[1] for r, _ in found)
            if locals_ != list(range(PER_MACHINE)):
                return (f"{world.label}: the workers of machine {agent} have LOCAL_RANK {locals_}, not "
                        f"{list(range(PER_MACHINE))}: each worker of a machine has its own")
        if len(by_agent) != MACHINES:
            return f"{world.label}: the workers came from {len(by_agent)} agent(s), not one per machine"
        ranks = sorted(place(world, r)[0] for r, _ in workers)
        if ranks != list(range(WORLD)):
            return f"{world.label}: the workers have RANK {ranks}, not 0 to {WORLD - 1}, one each"


EXERCISE = Exercise(
    id="4.3",
    title="two machines on one",
    kind="script",
    world_sizes=(WORLD,),
    jobs_of=job_of,
    timeout=60.0,
    warm_imports=jobs.WARM_IMPORTS,
    expected=lambda seed: {"initial": flat(make_model(0))},
    work=_work,
    checks=[
        runs_to_the_end("the job of two machines runs to the end", 2),
        Check(f"one job of {WORLD} workers: {MACHINES} agents of {PER_MACHINE}, RANK 0-{WORLD - 1}, LOCAL_RANK 0 and 1 "
              "on each machine", 3, _one_job, needs="partial",
              hint="the same --nnodes, rendezvous backend, endpoint ($HEAD:$PORT) and id ($JOB_ID) on both machines; "
                   "with the static rendezvous, --node-rank 0 and 1"),
        Check("each rank draws its own share of the data across the whole job: RANK and WORLD_SIZE", 2,
              _own_share_of_the_data,
              hint="DistributedSampler(num_replicas=WORLD_SIZE, rank=RANK): LOCAL_RANK only picks the device"),
        Check("exactly one writer in the job: global rank 0, not one per machine", 2, _one_writer,
              hint="if RANK == 0: torch.save(...); LOCAL_RANK 0 is on every machine"),
        Check("parameters identical on all ranks after every optimizer step", 1, params_identical_across_ranks,
              hint="wrap the model in DDP under torchrun"),
        Check("the job trains the same model as one process on the same global batches", 2,
              _same_model_every_launch, hint="per-rank batch = global batch // WORLD_SIZE"),
        Check("the file saved holds the trained weights of a plain TinyNet", 1, _file_holds_the_trained_model,
              hint="torch.save(model.module.state_dict(), args.out) on rank 0, after the last epoch"),
        Check("process group destroyed at the end", 1, _destroyed, hint="dist.destroy_process_group()"),
        Check("on GPUs each worker trains on the GPU of its LOCAL_RANK", 1, _gpu_of_the_local_rank, gpu_only=True,
              hint="device = torch.device('cuda', local_rank) with LOCAL_RANK from the environment"),
    ],
)
