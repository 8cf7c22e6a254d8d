"""Exercise 4.4: find and fix four planted bugs in a training script that must survive a killed worker.

The script handed out has 4.2's contract with a snapshot at the end of every epoch (resume, torchrun jobs
like 4.2's, killed in the middle of an epoch and while writing) and four mistakes of the kinds lessons 2-4
taught. 4.2's checks judge it, with one more for the data order, and without their hints: each failing
check names the symptom of a bug that is left, never its line.
The report opens with how many of the four are fixed, and the points are the planted bugs' (the script as
handed out earns only what it already does right). A fix may be any correct code, but it must train what
the script trains (its learning rate halves every epoch): lesson 4's own snapshot script, which has no schedule,
is no fix of this one.
"""

from __future__ import annotations

import dataclasses

import torch

from autograder import jobs
from autograder.checks import OTHER_CHECK_POINTS, PLANTED_BUG_POINTS, Check, drawn_shares, matches_reference, symptom
from autograder.exercises import ex4_2
from autograder.reference import flat, sampler_shares, trained_on_shares
from ddpcourse import make_model, toy_dataset

ORDER = "every epoch draws a new order of the data, in every attempt"
WRITER = "snapshots written by one rank: global rank 0"
ATOMIC = "a snapshot is written atomically: a kill during the write leaves the last one whole"
SAME = "after each kill the final weights equal the uninterrupted run's, bit for bit"
TRAINS = "the uninterrupted job trains what the script trains: its weights equal the course's run of it"
MOMENTUM = 0.9


def learning_rate(epoch: int) -> float:
    """The script's schedule: the learning rate halves every epoch."""
    return ex4_2.LR * 0.5 ** epoch


KILLED_IN_EPOCH = {"rank": 1, "attempt": 0, "when": "step", "n": 2 * ex4_2.STEPS_PER_EPOCH + 3}
KILLED_WRITING = {"rank": 0, "attempt": 0, "when": "save", "n": 2}
JOBS = (
    jobs.standalone(2, ex4_2.ARGS, restarts=2, name=ex4_2.NEVER, planted=True),
    jobs.standalone(2, ex4_2.ARGS, restarts=2, fault=KILLED_IN_EPOCH, name="torchrun, 2 processes, rank 1 killed in epoch 2"),
    jobs.standalone(2, ex4_2.ARGS, restarts=2, fault=KILLED_WRITING,
                    name="torchrun, 2 processes, rank 0 killed while writing its 2nd file"),
)


def two_machines() -> jobs.Job:
    return jobs.machines(2, 1, ex4_2.ARGS, restarts=2, planted=True,
                         name="torchrun, 2 machines of 1 process, never interrupted")


def _order_changes_every_epoch(runs):
    """Observed in the orders drawn: no attempt draws one order twice in a row, and the uninterrupted job draws a
    new one every epoch (whatever makes it so: set_epoch, or a sampler seeded anew)."""
    for world in runs:
        for k, attempt in enumerate(world.attempts):
            for r in attempt:
                orders = [e.get("indices") for e in r.of("sampler_iter")]
                again = next((n for n in range(1, len(orders)) if orders[n] == orders[n - 1]), None)
                if again is not None:
                    return (f"{world.label}, attempt {k}: rank {r.rank} drew the same samples in the same order "
                            f"in its sampler's passes {again} and {again + 1}")
    base = ex4_2.uninterrupted(runs)
    orders = [e.get("indices") for e in base.ranks[0].of("sampler_iter")] if base and base.ranks else []
    if orders and len({tuple(o or ()) for o in orders}) < len(orders):
        return f"{base.label}: rank 0 drew {len(orders)} epochs in only {len({tuple(o or ()) for o in orders})} orders"


def reference(world) -> torch.Tensor:
    """SGD with momentum and the script's schedule on the batches the job's ranks drew, epoch by epoch: a mistake
    in the order drawn is the order check's, not this one's. Ranks that drew unequally get the sampler's orders."""
    dataset = toy_dataset(n=ex4_2.N, seed=0)
    shares = drawn_shares(world, ex4_2.N, ex4_2.EPOCHS) or \
        [[list(s) for s in sampler_shares(dataset, world.world_size, epoch)] for epoch in range(ex4_2.EPOCHS)]
    per_rank = ex4_2.GLOBAL_BATCH // world.world_size
    return flat(trained_on_shares(lambda: make_model(0), dataset, shares, per_rank, ex4_2.LR, momentum=MOMENTUM,
                                  schedule=learning_rate))


def _trains_what_the_script_trains(runs):
    base = ex4_2.uninterrupted(runs)
    if base is None:
        return None
    return matches_reference(dataclasses.replace(runs, worlds=[base]), reference,
                             f"SGD (momentum {MOMENTUM}) with the script's learning rate, {ex4_2.LR} halved every "
                             "epoch, on the batches the ranks drew")


PLANTED = ((WRITER,), (SAME,), (ORDER,), (ATOMIC,))  # each planted bug, by the checks its symptom fails


def _quiet(check: Check) -> Check:
    verify = check.verify
    planted = any(check.name in symptom_of for symptom_of in PLANTED)
    return dataclasses.replace(check, hint="", hint_for=None,  # finding the fix is the exercise
                               points=PLANTED_BUG_POINTS if planted else OTHER_CHECK_POINTS,
                               verify=lambda runs: symptom(verify(runs)))


EXERCISE = dataclasses.replace(
    ex4_2.EXERCISE, id="4.4", title="find and fix: a job that must survive a killed worker",
    jobs=JOBS,
    jobs_of=lambda code: (*JOBS, two_machines()),
    checks=[*map(_quiet, ex4_2.CHECKS), _quiet(Check(ORDER, 0, _order_changes_every_epoch)),
            _quiet(Check(TRAINS, 0, _trains_what_the_script_trains))],
    planted=PLANTED,  # a bug is fixed when all the checks of its symptom pass
)
