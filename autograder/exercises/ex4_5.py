"""Exercise 4.5: lose a machine and keep training, at the smaller world size, as if nothing had happened.

The student makes 4.2's script elastic. It runs under the real torchrun four times: on two machines of one
process each with ``--nnodes=1:2`` (an elastic job), never interrupted; as one and as three processes on one
machine; and on two machines again, the second lost after its step 13 (its agent and its worker killed at once,
unwarned, by the rank host: nothing of the job knows where). The survivor's agent restarts its worker, which must
go on from the last snapshot at world size 1. What is judged is the training itself: every job takes the steps
one process takes, up to float rounding (the order of the sums changes with the world size), the job that lost a
machine included; snapshots come every ``--snapshot-every`` steps (4.2's check), and the survivor trains no step
twice and skips none; and the inputs still carry their noise.
Where a run parts from one process's, the report says at which step and what that step was given differently.
"""

from __future__ import annotations

import functools

import torch

from autograder import jobs
from autograder.checks import CAUSE, FIX, Check, runs_to_the_end
from autograder.exercises import Exercise
from autograder.exercises.ex4_2 import (ARGS, EVERY, EVERY_K, GLOBAL_BATCH, N, NOISE, STEPS, _inputs, _lr,
                                       _resume_point, _samples, _work, noise_spread, steps)
from autograder.hints import Hint
from ddpcourse import toy_dataset

LOST_AFTER = 13  # the lost machine's worker's step: the last whole snapshot before it holds step 10
ROUNDING = 1e-5  # how far sums taken in another order may leave the weights after 32 steps
ONE = "torchrun, 1 process, never interrupted"
THREE = "torchrun, 3 processes, never interrupted"
TWO = "torchrun, 2 machines of 1 process (--nnodes=1:2), never interrupted"
LOST = f"torchrun, 2 machines of 1 process (--nnodes=1:2), machine 2 lost after its step {LOST_AFTER}"
SCRIPT_ARGS = (*ARGS, "--snapshot-every", str(EVERY))


def planned_jobs() -> tuple[jobs.Job, ...]:
    """The four jobs, each elastic one on a rendezvous of its own each grading."""
    return (
        jobs.elastic(2, SCRIPT_ARGS, name=TWO),
        jobs.standalone(1, SCRIPT_ARGS, restarts=3, name=ONE, planted=True),
        jobs.standalone(3, SCRIPT_ARGS, restarts=3, name=THREE, planted=True),
        jobs.elastic(2, SCRIPT_ARGS, name=LOST, lost_after=LOST_AFTER),
    )


@functools.cache
def _dataset():
    return toy_dataset(n=N, seed=0)


def _job(runs, name):
    return next((w for w in runs if w.job == name), None)


def _lost(runs):
    return _job(runs, LOST)


def _survivor_went_on(runs):
    world = _lost(runs)
    if world is None:
        return None
    if not any(f.get("lost") for f in world.faults):
        return (f"{world.label}: the grader had nothing to interrupt: machine 2's worker never took step {LOST_AFTER}"
                f"{FIX}train every step of the run")
    if len(world.attempts) < 2:
        return f"{world.label}: torchrun did not start the survivor's worker again after the loss"
    sizes = {(r.first("worker") or {}).get("env", {}).get("WORLD_SIZE") for r in world.attempts[-1]}
    if sizes != {"1"}:
        return f"{world.label}: the restarted workers saw WORLD_SIZE {sorted(map(str, sizes))}, expected 1"


def _steps_left(world) -> str | None:
    """Whether the survivor took exactly the steps after the last whole snapshot; why not, else."""
    start = _resume_point(world) or 0  # no rank 0 in the first attempt: no snapshot it wrote
    taken = len(world.ranks[0].of("optimizer_step")) if world.ranks else 0
    if taken == STEPS - start:
        return None
    if taken == STEPS:
        return (f"{world.label}: at world size 1 the survivor took all {STEPS} steps again, from the start: the {start} "
                f"steps the last snapshot held were trained twice{FIX}resume from the snapshot when the job starts")
    held = f"the last whole snapshot before the loss held step {start} of {STEPS}, so {STEPS - start} were left"
    if taken > STEPS - start:
        return (f"{world.label}: at world size 1 the survivor took {taken} steps; {held}: "
                f"{taken - (STEPS - start)} step(s) were trained twice{CAUSE}where the run was is counted in "
                f"something that changes with the world size (this rank's batches or samples){FIX}keep the global step "
                "in the snapshot: it says the epoch and the place in it at any world size")
    return (f"{world.label}: at world size 1 the survivor took {taken} steps; {held}: {STEPS - start - taken} step(s) "
            f"were skipped{CAUSE}where the run was is counted in something that changes with the world size{FIX}keep "
            "the global step in the snapshot: it says the epoch and the place in it at any world size")


def _no_step_twice_or_skipped(runs):
    world = _lost(runs)
    if world is None or len(world.attempts) < 2 or not world.ranks:
        return None  # no restart: told by the check above
    return _steps_left(world)


def _trajectory(world) -> tuple[list[torch.Tensor], list]:
    """Rank 0's weights after each step of the run as it counts (for the job that lost a machine: the steps of
    the first attempt up to the snapshot, then the survivor's), and the ranks (of their attempt) that took each."""
    if world.job != LOST:
        return steps(world.ranks[0]), [(world.ranks, k) for k in range(len(steps(world.ranks[0])))]
    start = _resume_point(world) or 0  # no rank 0 in the first attempt: no snapshot it wrote
    first = {r.rank: r for r in world.attempts[0]}
    before = steps(first[0])[:start] if 0 in first else []
    after = steps(world.ranks[0])
    return before + after, [(world.attempts[0], k) for k in range(len(before))] + \
        [(world.ranks, k) for k in range(len(after))]


def _same_training_at_any_world_size(runs):
    one = _job(runs, ONE)
    if one is None or not one.ranks:
        return None
    want, fed = _trajectory(one)
    for world in runs:
        if world is one or not world.ranks:
            continue
        if world.job == LOST and (len(world.attempts) < 2 or _steps_left(world)):
            continue  # a survivor that did not go on, or took other steps: charged by the checks above
        got, given = _trajectory(world)
        if len(got) != len(want):
            return (f"{world.label} took {len(got)} steps where one process took {len(want)}{CAUSE}a step's batch "
                    f"depends on the world size{FIX}keep the global batch (--global-batch) whatever the world size: "
                    "each rank takes its share of it")
        apart = next((k for k, (a, b) in enumerate(zip(got, want)) if (a - b).abs().max().item() > ROUNDING), None)
        if apart is not None:
            gap = (got[apart] - want[apart]).abs().max().item()
            return (f"{world.label}: after step {apart + 1} rank 0's weights differ from one process's by {gap:.3g}, "
                    f"more than the order of the sums explains. " + _why(world, given[apart], fed[apart], apart))


def _rows(ranks, k) -> list[list[float]] | None:
    """The rows every rank's model was given in its ``k``-th training step (None if any is unknown)."""
    rows = []
    for r in sorted(ranks, key=lambda r: r.rank):
        given = _inputs(r)
        if k >= len(given) or given[k] is None:
            return None
        rows += torch.as_tensor(given[k], dtype=torch.float64).reshape(-1, _dataset().tensors[0].shape[1]).tolist()
    return rows


def _why(world, given, fed, step: int) -> str:
    """What the step was given that one process's was not: other samples, other noise, another learning rate."""
    (ranks, k), (one_ranks, n) = given, fed
    got, want = _rows(ranks, k), _rows(one_ranks, n)
    if got is not None and want is not None:
        got_samples, want_samples = _samples(sum(got, [])), _samples(sum(want, []))
        if sorted(got_samples) != sorted(want_samples):
            return (f"Its step {step + 1} trained on samples {sorted(got_samples)} where one process trained on "
                    f"{sorted(want_samples)}{CAUSE}a step's batch is not the same at every world size{FIX}each rank "
                    "takes its share of the same global batch: --global-batch divided by the world size")
        noise = dict(zip(want_samples, want))
        if any(max(abs(a - b) for a, b in zip(noise[s], row)) > 1e-6 for s, row in zip(got_samples, got)):
            if world.job == LOST and k == 0 and ranks is world.ranks:
                return (f"Its step {step + 1}, the survivor's first, trained on the samples one process trained on, "
                        f"with other noise{CAUSE}the noise did not go on where the run was: the generator's state "
                        f"was not restored, or not brought to the step the snapshot holds{FIX}keep the generator's "
                        "state in the snapshot, or draw each step's noise from a seed of the global step")
            return (f"Its step {step + 1} trained on the samples one process trained on, with other noise"
                    f"{CAUSE}the noise a sample gets depends on the rank that holds it, or on the world size{FIX}draw "
                    "the noise of the whole global batch the same way on every rank, and take the rows of your samples")
    lr, lr_one = _lr(_first(ranks), k), _lr(_first(one_ranks), n)
    if lr is not None and lr_one is not None and abs(lr - lr_one) > 1e-12:
        return (f"Its step {step + 1} used learning rate {lr:.6g} where one process's used {lr_one:.6g}{CAUSE}the "
                f"schedule depends on the world size, or did not go on where it was{FIX}count the schedule in global "
                "steps, and keep its state in the snapshot")
    if world.job == LOST and k == 0 and ranks is world.ranks:
        return (f"Its step {step + 1}, the survivor's first, was given the same inputs and learning rate{CAUSE}the "
                f"optimizer's state (momentum) was not restored{FIX}load optimizer.state_dict() from the snapshot too")
    return (f"Its step {step + 1} was given the same inputs and learning rate as one process's{CAUSE}the gradient "
            "is not the mean over the global batch")


def _first(ranks):
    """Rank 0 of an attempt (the lowest rank there is)."""
    return min(ranks, key=lambda r: r.rank)


def _own_shares(runs):
    """Observed in what each rank's DDP forward was given, step by step, in the jobs of several ranks."""
    for world in runs:
        if world.job not in (TWO, THREE) or not world.ranks:
            continue
        fed = {r.rank: _inputs(r) for r in world.ranks}
        idle = sorted(rank for rank, given in fed.items() if not given)
        if idle:
            return (f"{world.label}: rank {idle[0]} trained through no DistributedDataParallel forward that the grader "
                    f"saw{FIX}keep the model wrapped in DDP, as in 4.2's script")
        for k in range(min(len(given) for given in fed.values())):
            if any(given[k] is None for given in fed.values()):
                continue
            shares = {rank: _samples(given[k]) for rank, given in fed.items()}
            together = [i for share in shares.values() for i in share]
            if len(together) != GLOBAL_BATCH or len(set(together)) != GLOBAL_BATCH:
                sizes = ", ".join(f"rank {rank} {len(share)}" for rank, share in sorted(shares.items()))
                return (f"{world.label}: in step {k + 1} the ranks trained on {sizes} samples, {len(set(together))} "
                        f"different ones, where each of the {world.world_size} ranks takes {GLOBAL_BATCH // world.world_size} "
                        f"of the step's {GLOBAL_BATCH}{CAUSE}every rank computes what the others compute: the job is no "
                        f"faster for its ranks{FIX}each rank takes its own share of the global batch: --global-batch "
                        "divided by the world size, the shares apart")


def _noise_kept(runs):
    one = _job(runs, ONE)
    rows = _rows(one.ranks, 0) if one and one.ranks else None
    if not rows:
        return None
    spread = noise_spread(rows)
    if spread < NOISE / 2:
        return (f"{one.label}: the first step's inputs are the dataset's samples with noise of spread {spread:.3g}, "
                f"not {NOISE}: the noise was dropped{FIX}keep the noise: 0.05 times a standard normal draw for every "
                "input, drawn so that it does not depend on the world size")


# check -> its hints (EVERY_K's are 4.2's).
ELASTIC = "Elastic ranges, live"
HINTS = {
    "went_on": Hint(
        idea="In an elastic job the survivors' agents start their workers again in a smaller group once the lost "
             "machine is forgotten; the check looks for the survivor's new worker, at world size 1.",
        section=ELASTIC,
        where="Look at whether your script trains every step on both machines before the loss, and at how it "
              "starts: it must start at whatever world size the new round gives it.",
        how="The grader's command makes the job elastic: your script only has to train every step, and at every "
            "start read its rank and world size afresh from the launcher, with nothing tied to the size of the job "
            "before."),
    "left": Hint(
        idea="After the loss the survivor goes on at the step after the last whole snapshot, alone: where the run "
             "was must be kept in a number that means the same at any world size.",
        section=ELASTIC,
        where="Look at what your snapshot records as the run's place, and at how your resume turns it into the "
              "epoch and the batch to start at.",
        how="Keep the global step, the optimizer steps of the whole job, in the snapshot, and work out the epoch and "
            "the place in it from that step and the global batch, never from this rank's batch size or the samples "
            "it has read."),
    "same": Hint(
        idea="Every job, at 1, 2 or 3 ranks or after losing a machine, takes each step as one process takes it, up "
             "to rounding: the same global batch, the same noise on each sample, the same learning rate, and after a "
             "resume the same optimizer state.",
        section=ELASTIC,
        where="Read which step the message says parted first and what it was given differently, then look at the "
              "part of your script that decides that: the batch split, the noise, the schedule or the resume.",
        how="Make everything a step uses depend on the step alone, never on the world size or on which rank holds a "
            "sample: each rank takes its share of the same global batch, a sample's noise comes out the same "
            "whichever rank draws it, the schedule counts global steps, and the snapshot restores the optimizer."),
    "shares": Hint(
        idea="Each step's global batch is dealt out among the ranks: each trains on its own part, the parts apart "
             "and together the whole batch, so that more ranks make the job faster.",
        section=ELASTIC,
        where="Look at how your script picks this rank's samples for a step: the sampler's rank and number of "
              "replicas, and the batch size each rank loads.",
        how="Give each rank its own part of every step's --global-batch samples, the global batch divided by the "
            "world size, apart from the other ranks' parts (a DistributedSampler given the job's rank and world size "
            "deals them out), and keep the model wrapped in DDP."),
    "noise": Hint(
        idea="The script adds random noise to every input; making that noise the same at any world size must not "
             "drop it or shrink it.",
        section=ELASTIC,
        where="Look at the line of your training step that adds noise to the inputs, and at what it adds to each of "
              "this rank's samples.",
        how="Keep adding noise to every input, at the scale of the script handed out, and draw it so that each "
            "sample's noise depends neither on the world size nor on the rank that holds the sample."),
}

EXERCISE = Exercise(
    id="4.5",
    title="lose a machine, keep training: the same run at any world size",
    kind="script",
    jobs=planned_jobs(),
    jobs_of=lambda code: planned_jobs(),
    timeout=60.0,
    warm_imports=jobs.WARM_IMPORTS,
    work=_work,
    checks=[
        runs_to_the_end("every job finishes: at 1, 2 and 3 processes, and the one that lost a machine", 2),
        Check("after losing a machine the job goes on: torchrun restarts the survivor's worker at world size 1", 1,
              _survivor_went_on, needs="partial", hint=HINTS["went_on"]),
        EVERY_K,
        Check("the survivor goes on after the last whole snapshot: no step trained twice, none skipped", 2,
              _no_step_twice_or_skipped, hint=HINTS["left"]),
        Check("the same training at any world size, a machine lost or not: every step as one process takes it", 4,
              _same_training_at_any_world_size, needs="partial", hint=HINTS["same"]),
        Check("each rank trains on its own share of every step's global batch", 2, _own_shares, hint=HINTS["shares"]),
        Check("every input still carries its noise", 2, _noise_kept, hint=HINTS["noise"]),
    ],
)
