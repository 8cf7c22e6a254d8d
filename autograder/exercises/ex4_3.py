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
from autograder.exercises.ex4_1 import ARGS, HINTS as HINTS_4_1, _destroyed, _file_holds_the_trained_model, \
    _gpu_of_the_local_rank, _one_writer, _own_share_of_the_data, _same_model_every_launch, _work, moved_meeting_place, place
from autograder.hints import Hint
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
        moved = moved_meeting_place(world)
        if moved:
            return moved
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


# check -> its hints; those of the checks 4.1 has too are 4.1's.
HINTS = {
    "one_job": Hint(
        idea="Two torchrun agents form one job only when they meet in the same rendezvous and agree on its size; "
             "then torchrun numbers the workers RANK 0 upwards across the machines, and LOCAL_RANK from 0 on each.",
        section="4. Several machines",
        where="Compare your two strings in NODE_COMMANDS option by option; the message says what kept the agents "
              "apart or what the workers were told.",
        how="Give both commands the same number of machines, the same number of workers per machine and the same "
            "rendezvous: with c10d the same backend, endpoint ($HEAD and $PORT) and id ($JOB_ID); with the static "
            "rendezvous the same master address and port, and a node rank of its own for each machine, 0 at $HEAD."),
    "share": Hint(
        idea="On two machines LOCAL_RANK repeats: it is a worker's place on its machine, RANK its place in the whole "
             "job. A sampler given LOCAL_RANK deals the same shares on both machines, and half the data is never "
             "drawn.",
        section="The environment of a worker",
        where="Look where your script builds its DistributedSampler: which of the launcher's variables its rank "
              "and number of replicas come from, and whether its seed is the same on every machine.",
        how="Give the sampler the worker's RANK and the job's WORLD_SIZE, both from the environment, and one seed "
            "for the whole job; LOCAL_RANK only picks the device."),
    "writer": Hint(
        idea="One process writes the file for the whole job: global rank 0. On one machine LOCAL_RANK 0 is the same "
             "process; on two there is one on each machine.",
        section="The environment of a worker",
        where="Look at the condition in front of your torch.save, and at which rank it tests.",
        how="Test the worker's global rank, RANK, in front of the save; LOCAL_RANK 0 exists on every machine.",
        lines_of=("save",)),
    "same_model": Hint(
        idea="A job of 4 ranks on two machines trains the weights one process trains on the same global batches, up "
             "to float rounding, when each rank takes its own part of every global batch.",
        section="2. One script for every launch",
        where="Look at how your script splits a step's samples: the sampler's rank and number of replicas, and the "
              "batch size each rank loads.",
        how="Keep the global batch of --global-batch whatever the number of ranks: each rank loads the global batch "
            "divided by the job's WORLD_SIZE, from its own share of the data. If the checks above fail too, fix them "
            "first: they often cause this one."),
}

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
              "on each machine", 3, _one_job, needs="partial", hint=HINTS["one_job"]),
        Check("each rank draws its own share of the data across the whole job: RANK and WORLD_SIZE", 2,
              _own_share_of_the_data, hint=HINTS["share"]),
        Check("exactly one writer in the job: global rank 0, not one per machine", 2, _one_writer,
              hint=HINTS["writer"]),
        Check("parameters identical on all ranks after every optimizer step", 1, params_identical_across_ranks,
              hint=HINTS_4_1["identical"]),
        Check("the job trains the same model as one process on the same global batches", 2,
              _same_model_every_launch, hint=HINTS["same_model"]),
        Check("the file saved holds the trained weights of a plain TinyNet", 1, _file_holds_the_trained_model,
              hint=HINTS_4_1["file"]),
        Check("process group destroyed at the end", 1, _destroyed, hint=HINTS_4_1["destroyed"]),
        Check("on GPUs each worker trains on the GPU of its LOCAL_RANK", 1, _gpu_of_the_local_rank, gpu_only=True,
              hint=HINTS_4_1["gpu"]),
    ],
)
