"""Exercise 4.6: preempted on Slurm, graded on a real Slurm of the submission's own.

The cell is a training script that also holds, in ``BATCH_SCRIPT``, the ``sbatch`` script that runs it on
2 nodes x 2 workers. The grader reads that string without running the cell (as 4.3 reads its commands),
starts a controller and two nodes inside the submission's sandbox (ranks/slurm.py, autograder/batch.py),
submits the script with the cell saved beside it as ``train.py``, and, once rank 0 has taken
PREEMPT_AFTER steps, preempts
the job as a scheduler does: ``scontrol requeue``, SIGTERM to every process of the job and SIGKILL five
seconds later, back in the queue, started again at once. The job's ``torchrun`` is the real one, whose
workers are traced: each run of the job is a list of attempts (world.slurm["runs"] says whose).

What is judged, each from what the job did: one agent per node started by srun; the rendezvous at the
job's first node under the job's id (from each agent's own command line, as the shell expanded it); the
requeue (the course's Slurm requeues only jobs that ask, ``JobRequeue=0``; a job it refuses is cancelled
and submitted again, as its user would, so that what follows is still judged); the snapshot on SIGTERM
(the run after the preemption trains no step twice); and the resume (the job ends with an uninterrupted
run's weights, having gone on from the snapshot).
"""

from __future__ import annotations

import ast
import functools
import shlex

import torch
import torch.nn.functional as F

from autograder import jobs, nodes
from autograder.checks import Check, NotJudged
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import flat
from ddpcourse import make_model, toy_dataset
from autograder.batch import NODES

NAME = "BATCH_SCRIPT"
NODES_, PER_NODE = 2, 2
WORLD = NODES_ * PER_NODE
STEPS, EVERY, GLOBAL_BATCH, LR, N = 40, 10, 16, 0.05, 96
ARGS = ("--steps", str(STEPS), "--every", str(EVERY), "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR),
        "--step-seconds", "0.2")
PREEMPT_AFTER = 14  # rank 0's optimizer steps before the preemption: four past the periodic snapshot of step 10
FIRST_NODE = next(iter(NODES))


def batch_script(code: str) -> str:
    """The cell's BATCH_SCRIPT, read from its syntax tree; nodes.CommandError if it cannot be submitted."""
    from autograder.source import parse

    try:
        tree = parse(code)
    except SyntaxError:
        raise nodes.CommandError("the cell does not parse; fix the syntax error first") from None
    found = [n.value for n in tree.body if isinstance(n, ast.Assign)
             and any(isinstance(t, ast.Name) and t.id == NAME for t in n.targets)]
    if not found:
        raise nodes.CommandError(f"the cell defines no {NAME}: the sbatch script, as one string")
    try:
        value = ast.literal_eval(found[-1])
    except ValueError:
        raise nodes.CommandError(f"{NAME} must be written out as one string (no names, calls or f-strings: the "
                                 "grader reads it without running your code)") from None
    if not isinstance(value, str) or not value.strip():
        raise nodes.CommandError(f"{NAME} must be a string: the sbatch script")
    if len(value) > 20_000:
        raise nodes.CommandError(f"{NAME} is {len(value)} characters long: a batch script of a page will do")
    if not value.lstrip().startswith("#!"):
        raise nodes.CommandError(f"{NAME} must start with its interpreter line, #!/bin/bash, as sbatch requires")
    return value


def job_of(code: str) -> tuple[jobs.Job, ...]:
    return (jobs.Job(f"the batch job: {NODES_} nodes x {PER_NODE} workers, preempted after step {PREEMPT_AFTER}",
                     WORLD, (("--nnodes=2",),) * NODES_, ARGS, planted=False, nodes=NODES_,
                     batch=batch_script(code), preempt_after=PREEMPT_AFTER),)


@functools.cache
def reference() -> tuple[torch.Tensor, ...]:
    """One process's parameters after each of the STEPS steps, on the same global batches."""
    x, y = toy_dataset(n=N, seed=0).tensors
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    found = []
    for step in range(STEPS):
        epoch, start = divmod(step * GLOBAL_BATCH, N)
        order = torch.randperm(N, generator=torch.Generator().manual_seed(epoch))
        batch = order[start:start + GLOBAL_BATCH]
        optimizer.zero_grad()
        F.cross_entropy(model(x[batch]), y[batch]).backward()
        optimizer.step()
        found.append(flat(model))
    return tuple(found)


def step_of(params: torch.Tensor | None) -> int | None:
    """Which step of one uninterrupted process these parameters are after (1 to STEPS), if any."""
    if params is None:
        return None
    for k, expected in enumerate(reference()):
        if expected.shape == params.shape and torch.allclose(params, expected, rtol=1e-4, atol=1e-5):
            return k + 1
    return None


def slurm(world) -> dict:
    return getattr(world, "slurm", None) or {}


def run_attempts(world, run: int) -> list:
    """The attempts (each a list of rank records) of one run of the batch job: 0 before the preemption."""
    owners = slurm(world).get("runs") or []
    return [ranks for ranks, owner in zip(world.attempts, owners) if owner == run]


def agents(world, run: int = 0) -> list[dict]:
    """What each torchrun agent of a run recorded: its command line and Slurm's variables (ranks/slurm.py)."""
    folder = world.folder.sub(f"run{run}") if world.folder is not None else None
    if folder is None:
        return []
    found = []
    for name in sorted(folder.names())[:64]:
        if name.startswith("agent-") and name.endswith(".json"):
            record = folder.read_json(name, limit=1 << 16)
            if isinstance(record, dict) and isinstance(record.get("argv"), list):
                found.append(record)
    return found


def parsed(record: dict) -> nodes.Node | None:
    """An agent's command line as torchrun read it, or None if torchrun could not."""
    argv = [str(a) for a in record["argv"]]
    try:
        return nodes.parse(0, shlex.join(["torchrun", *argv[:-1], nodes.SCRIPT]) if argv else "torchrun")
    except nodes.CommandError:
        return None


def _runs_to_the_end(runs):
    from autograder.diagnosis import summary

    world = runs.worlds[0]
    error = slurm(world).get("error")
    if error:
        return error
    if not world.attempts:
        return ("no worker of the job started: did the batch script start `torchrun ... train.py` with srun? "
                f"The job's output:\n{world.agent_output.strip()[-1500:] or '(nothing)'}")
    if world.unmet is not None:
        return (f"the batch job still ran {world.unmet:.0f} s after its last worker ended, and was stopped: a "
                "torchrun agent waited at the rendezvous for agents that never came"
                + (f" ({len(agents(world))} agents started for {NODES_} nodes)" if len(agents(world)) > NODES_ else ""))
    if not world.complete or world.timed_out:
        extra = len(agents(world)) - NODES_
        return f"{summary(world)}" + (f"\n({extra} torchrun agent(s) more than the job has nodes: see the agents' "
                                      "check)" if extra > 0 else "")
    return None


def _hint_for_the_end(runs):
    from autograder.diagnosis import hint_for

    broken = runs.first_incomplete()
    if broken is not None and slurm(broken).get("error"):
        return ("sbatch reads the #SBATCH lines before anything runs, and Slurm must be able to start the job: fix "
                "the line its message names")
    if broken is None or not broken.attempts or len(agents(broken)) != NODES_:
        return HINTS["agents"]  # the job never ran, or ran with agents the job has no nodes for
    return hint_for(broken)


def recorded_agents(world) -> list[dict]:
    """The first run's agents; NotJudged where the job never ran (its end says why)."""
    found = agents(world)
    if not found and slurm(world).get("error"):
        raise NotJudged("not judged: the job never ran (see above)")
    return found


def _one_agent_per_node(runs):
    world = runs.worlds[0]
    found = recorded_agents(world)
    if not found:
        return "no torchrun agent started: the batch script must run `srun torchrun ... train.py`"
    per_node: dict[str, int] = {}
    for record in found:
        per_node[str(record.get("SLURMD_NODENAME"))] = per_node.get(str(record.get("SLURMD_NODENAME")), 0) + 1
    if sorted(per_node) != sorted(NODES) or set(per_node.values()) != {1}:
        said = ", ".join(f"{count} on {node}" for node, count in sorted(per_node.items()))
        return (f"the first run started {len(found)} torchrun agent(s): {said}. One srun task per node, each a "
                f"torchrun agent that starts the node's {PER_NODE} workers: --nodes={NODES_} --ntasks-per-node=1")
    for record in found:
        node = parsed(record)
        if node is None:
            return f"torchrun could not read the command on {record.get('SLURMD_NODENAME')}: {shlex.join(record['argv'])}"
        if str(node.get("nproc_per_node")) != str(PER_NODE) or str(node.get("nnodes")) not in (str(NODES_), f"{NODES_}:{NODES_}"):
            return (f"on {record.get('SLURMD_NODENAME')} torchrun was given --nnodes={node.get('nnodes')} "
                    f"--nproc-per-node={node.get('nproc_per_node')}: a job of {NODES_} nodes x {PER_NODE} workers "
                    f"(--nnodes=\"$SLURM_NNODES\" --nproc-per-node={PER_NODE})")
    first = run_attempts(world, 0)
    workers = [(r.first("worker") or {}).get("env") or {} for r in (first[0] if first else [])]
    ranks = sorted(int(env["RANK"]) for env in workers if str(env.get("RANK", "")).isdigit())
    if workers and ranks != list(range(WORLD)):
        return f"the workers of the first run have RANK {ranks}, not 0 to {WORLD - 1}: the agents did not form one job"
    return None


def _endpoint_on_the_first_node(runs):
    found = recorded_agents(runs.worlds[0])
    if not found:
        raise NotJudged("not judged: no torchrun agent started (see the agents)")
    for record in found:
        node = parsed(record)
        if node is None:
            continue  # said under the agents
        where = record.get("SLURMD_NODENAME")
        if node.rendezvous != "c10d":
            return (f"on {where} torchrun used the {node.rendezvous} rendezvous: meet with --rdzv-backend=c10d at "
                    "the job's first node")
        host = node.endpoint.rsplit(":", 1)[0].strip("[]") if ":" in node.endpoint else node.endpoint
        if host not in (FIRST_NODE, NODES[FIRST_NODE]):
            return (f"on {where} the rendezvous endpoint was {node.endpoint!r}, but the job's first node is "
                    f"{FIRST_NODE} (its address {NODES[FIRST_NODE]}): on a cluster {host or 'localhost'} is "
                    "each node itself, or a machine outside the job. Take the first of "
                    '`scontrol show hostnames "$SLURM_JOB_NODELIST"`')
    return None


def _id_of_the_job(runs):
    found = [record for record in recorded_agents(runs.worlds[0]) if parsed(record) is not None
             and parsed(record).rendezvous == "c10d"]
    if not found:
        raise NotJudged("not judged: no torchrun agent met by the c10d rendezvous (see above)")
    for record in found:
        node = parsed(record)
        if str(node.get("rdzv_id")) != str(record.get("SLURM_JOB_ID")):
            return (f"on {record.get('SLURMD_NODENAME')} --rdzv-id was {node.get('rdzv_id')!r}, but the job's id "
                    f"is {record.get('SLURM_JOB_ID')}: two jobs meeting at one endpoint under one id would join "
                    'each other. Use --rdzv-id="$SLURM_JOB_ID"')
    return None


def _requeued(runs):
    world = runs.worlds[0]
    preempted = slurm(world).get("preempted") or {}
    if not preempted.get("asked"):
        raise NotJudged(f"not judged: the job never reached step {PREEMPT_AFTER}, where the grader preempts it")
    if not preempted.get("ok"):
        return (f"Slurm refused to requeue the job ({preempted.get('said') or 'no reason given'}): a job that does "
                "not ask for it is cancelled when it is preempted, and waits for someone to submit it again (the "
                "grader did, to judge the rest). Add #SBATCH --requeue")
    if not run_attempts(world, 1):
        return "the job was requeued but never ran again: no worker of its second run started"
    return None


def _steps(ranks) -> list[torch.Tensor]:
    rank0 = next((r for r in ranks if r.rank == 0), None)
    return rank0.kept_all("optimizer step") if rank0 is not None else []


def _run_steps(world, run: int) -> tuple[int | None, int | None]:
    """The step one run of the job started after (0: from scratch) and the last it finished, as one
    uninterrupted process would number them; None where its weights match none of that process's."""
    taken = [p for ranks in run_attempts(world, run) for p in _steps(ranks)]
    if not taken:
        return None, None
    first, last = step_of(taken[0]), step_of(taken[-1])
    return (first - 1 if first is not None else None), last


def _last_step_before(world) -> int | None:
    """The last step the first run finished. A worker SIGTERM or SIGKILL ended kept no weights: then its steps
    are counted, from the fresh start every first run makes."""
    _, last = _run_steps(world, 0)
    if last is not None:
        return last
    rank0 = [r for ranks in run_attempts(world, 0) for r in ranks if r.rank == 0]
    counted = sum(len(r.of("optimizer_step")) for r in rank0)
    return counted or None


def _snapshot_on_sigterm(runs):
    world = runs.worlds[0]
    if not (slurm(world).get("preempted") or {}).get("asked"):
        raise NotJudged(f"not judged: the job never reached step {PREEMPT_AFTER}, where the grader preempts it")
    first = run_attempts(world, 0)
    rank0 = next((r for r in first[-1] if r.rank == 0), None) if first else None
    steps_at = sorted(e["seq"] for e in rank0.of("optimizer_step")) if rank0 is not None else []
    if not steps_at:
        raise NotJudged("not judged: rank 0 of the first run took no step (see above)")
    writes = sorted(e["seq"] for kind in ("saved", "placed") for e in rank0.of(kind))
    last = _last_step_before(world) or len(steps_at)
    if not any(seq > steps_at[-1] for seq in writes):
        before = [sum(1 for s in steps_at if s < seq) for seq in writes]
        return (f"the first run was preempted after step {last}, and rank 0 wrote no file after that step before "
                f"the job was killed: every step since its last snapshot ({f'step {before[-1]}' if before else 'none'}) "
                "is lost and trained again. On SIGTERM, finish the step, agree on every rank that one of them got "
                "the signal, and have rank 0 write a snapshot before every rank leaves")
    start, _ = _run_steps(world, 1) if run_attempts(world, 1) else (None, None)
    if start and last and start < last:
        return (f"rank 0 wrote a file after the first run's last step, {last}, but the run after the preemption "
                f"started after step {start}: steps {start + 1} to {last} were trained twice. The snapshot written "
                "on SIGTERM must hold that step, at the path the next run loads")
    return None


def _goes_on_from_the_snapshot(runs):
    world = runs.worlds[0]
    if not run_attempts(world, 1):
        raise NotJudged("not judged: the job did not run again after the preemption (see the requeue above)")
    start, end = _run_steps(world, 1)
    final = _steps(run_attempts(world, 1)[-1])
    if not final:
        return "the run after the preemption took no optimizer step"
    if step_of(final[-1]) != STEPS:
        return (f"after the preemption the job did not end with the weights of one uninterrupted process after "
                f"{STEPS} steps on the same global batches" + (f" (its last weights are those of step {end})"
                                                               if end is not None else ""))
    if start == 0:
        return (f"the run after the preemption trained all {STEPS} steps again from the start: it did not go on from "
                "the snapshot. Load the snapshot (model, optimizer, step) when it exists, on every rank, before "
                "the loop")
    return None


HINTS = {
    "agents": Hint(
        idea="On Slurm, srun starts one task per node and each task is one torchrun agent, which starts that node's "
             "workers itself. A task per GPU would start an agent per GPU, each with its own workers.",
        section="On a cluster: Slurm",
        where="Look at #SBATCH --nodes and --ntasks-per-node, and at the torchrun options --nnodes and "
              "--nproc-per-node in your srun line.",
        how="Ask Slurm for two nodes and one task on each of them, and give torchrun the number of nodes the job "
            "has ($SLURM_NNODES) and two workers per node: srun then starts one agent on each node."),
    "endpoint": Hint(
        idea="The agents meet at a rendezvous that one of them hosts: on a cluster, the job's first node. localhost "
             "on each node is that node itself.",
        section="On a cluster: Slurm",
        where="Look at --rdzv-endpoint in your srun line, and at where its host comes from.",
        how="In the batch script, take the first name that scontrol's hostnames lists for $SLURM_JOB_NODELIST, and "
            "give every agent the c10d rendezvous at that node, on a port derived from the job's id."),
    "job_id": Hint(
        idea="The rendezvous id names the job at its endpoint: two jobs with one id at one endpoint would join "
             "each other. Slurm gives every job an id of its own.",
        section="On a cluster: Slurm",
        where="Look at --rdzv-id in your srun line.",
        how="Give --rdzv-id the job's own id, which Slurm puts in $SLURM_JOB_ID on every node."),
    "requeue": Hint(
        idea="A preempted job goes back in the queue only if it asked for it; otherwise Slurm cancels it.",
        section="A real Slurm: preempted, requeued, resumed",
        where="Look at the #SBATCH lines at the top of your batch script.",
        how="Add the --requeue option to the #SBATCH lines of the batch script."),
    "sigterm": Hint(
        idea="A preemption sends SIGTERM to every process of the job and SIGKILL a few seconds later. A script that "
             "snapshots only every N steps loses the steps since its last snapshot and trains them again.",
        section="A real Slurm: preempted, requeued, resumed",
        where="Look at what your script does when SIGTERM arrives, and at when rank 0 writes a snapshot.",
        how="Install a handler that only sets a flag; after each optimizer step, all-reduce the flag (MAX) so that "
            "every rank agrees; if it is set, rank 0 writes the snapshot and every rank leaves the loop."),
    "resume": Hint(
        idea="After the requeue Slurm runs the batch script again from the top: the job is new processes, and "
             "only the snapshot carries what the first run did.",
        section="3. Fault tolerance: restarts and snapshots",
        where="Look at the start of your script: whether it loads the snapshot before the loop, on every rank.",
        how="If the snapshot file exists, load the model's and the optimizer's state and the step from it, on every "
            "rank, before wrapping the model in DDP; then go on from that step."),
}

EXERCISE = Exercise(
    id="4.6",
    title="preempted on Slurm",
    kind="script",
    world_sizes=(WORLD,),
    jobs_of=job_of,
    timeout=150.0,
    quiet=3600.0,  # a job waits in Slurm's queue and for its rendezvous: only the time limit ends it
    warm_imports=(),
    work=lambda runs: None,
    checks=[
        Check("the batch job runs to the end on the course's Slurm, after its preemption", 2, _runs_to_the_end,
              needs="partial", hint_for=_hint_for_the_end),
        Check(f"srun starts one torchrun agent per node: {NODES_} nodes x {PER_NODE} workers, RANK 0-{WORLD - 1}", 3,
              _one_agent_per_node, needs="seen", hint=HINTS["agents"]),
        Check("the rendezvous is at the job's first node, with the c10d backend", 2, _endpoint_on_the_first_node,
              needs="seen", hint=HINTS["endpoint"]),
        Check("the rendezvous id is the job's id, $SLURM_JOB_ID", 1, _id_of_the_job, needs="seen",
              hint=HINTS["job_id"]),
        Check("preempted, the job goes back in the queue: --requeue", 2, _requeued, needs="seen",
              hint=HINTS["requeue"]),
        Check("on SIGTERM rank 0 snapshots the step every rank finished: nothing is trained twice", 2,
              _snapshot_on_sigterm, needs="partial", hint=HINTS["sigterm"]),
        Check("after the preemption the job goes on from its snapshot and ends with an uninterrupted run's weights", 2,
              _goes_on_from_the_snapshot, hint=HINTS["resume"]),
    ],
)
