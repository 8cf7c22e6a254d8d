"""Exercise 4.4: find and fix four planted bugs in a training script that must survive a killed worker.

The script handed out has 4.2's contract (snapshots, resume, the same four torchrun jobs) and four
mistakes of the kinds lessons 2-4 taught. 4.2's checks judge it, with one more for the data order,
and without their hints: each failing check names the symptom of a bug that is left, never its line.
The report opens with how many of the four are fixed.
"""

from __future__ import annotations

import dataclasses

from autograder.checks import Check, symptom
from autograder.exercises import ex4_2

ORDER = "every epoch draws a new order of the data, in every attempt"
WRITER = "snapshots written by one rank: global rank 0"
ATOMIC = "a snapshot is written atomically: a kill during the write leaves the last one whole"
SAME = "after each kill the final weights equal the uninterrupted run's, bit for bit"


def _order_changes_every_epoch(runs):
    for world in runs:
        for k, attempt in enumerate(world.attempts):
            for r in attempt:
                epochs = ex4_2.sampler_epochs(r)
                if len(epochs) > 1 and len(set(epochs)) < len(epochs):
                    return (f"{world.label}, attempt {k}: rank {r.rank} went through its sampler {len(epochs)} times, "
                            f"with epochs {epochs}: the epochs repeat one order of the samples")
    base = ex4_2.uninterrupted(runs)
    drawn = ex4_2.sampler_epochs(base.ranks[0]) if base and base.ranks else []
    if drawn and drawn != list(range(ex4_2.EPOCHS)):
        return f"{base.label}: rank 0's sampler ran with epochs {drawn}, not 0 to {ex4_2.EPOCHS - 1}"


def _quiet(check: Check) -> Check:
    verify = check.verify
    return dataclasses.replace(check, hint="", hint_for=None,  # finding the fix is the exercise
                               verify=lambda runs: symptom(verify(runs)))


EXERCISE = dataclasses.replace(
    ex4_2.EXERCISE, id="4.4", title="find and fix: a job that must survive a killed worker",
    checks=[*map(_quiet, ex4_2.EXERCISE.checks), Check(ORDER, 2, _order_changes_every_epoch)],
    # Each planted bug, by the checks its symptom fails: a bug is fixed when all of them pass.
    planted=((WRITER,), (SAME,), (ORDER,), (ATOMIC,)),
)
