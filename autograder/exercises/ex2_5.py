"""Exercise 2.5: find the bugs in a DDP training script.

The script handed out has the same contract as 2.2's (the toy dataset, TinyNet, one checkpoint)
and several mistakes of the kinds lesson 2 taught, so 2.2's checks judge it: each names the
symptom of a bug that is left (two checkpoint writers, the same order every epoch, training that
differs from the reference by a factor of the world size...), never the line it is on nor its fix:
finding that is the exercise. The points are the planted bugs' (the script as handed out earns only
what it already does right, a sixth of the whole); 2.2's other checks stay, so a fix that breaks
something else still costs.
"""

from __future__ import annotations

import dataclasses

from autograder.checks import OTHER_CHECK_POINTS, PLANTED_BUG_POINTS, symptom
from autograder.exercises import ex2_2

# 2.2's checks of the planted bugs, under names that say what goes wrong, not what to write.
SYMPTOMS = {
    "exactly one checkpoint writer: global rank 0": "exactly one process writes the checkpoint",
    ex2_2.ORDER: "the order of the samples changes every epoch",
    "equal to the single-process reference trained on the same global batches":
        "equal to the single-process reference trained on the same global batches",
    "checkpoint keys have no 'module.' prefix and load strictly into the plain model":
        "the checkpoint loads strictly into the plain, unwrapped model",
    "process group destroyed at the end": "no process ends with its process group still open",
}
PLANTED = tuple(SYMPTOMS.values())
OTHER_POINTS = {"DDP on GPUs: device_ids=[local_rank]": 0}  # the others: OTHER_CHECK_POINTS each


def _as_in_2_5(check):
    """2.2's check with the symptom alone in its message (finding the cause is the exercise), no hint."""
    points = PLANTED_BUG_POINTS if check.name in SYMPTOMS else OTHER_POINTS.get(check.name, OTHER_CHECK_POINTS)
    return dataclasses.replace(check, name=SYMPTOMS.get(check.name, check.name), points=points, hint="",
                               hint_for=None, verify=lambda runs, verify=check.verify: symptom(verify(runs)))


EXERCISE = dataclasses.replace(
    ex2_2.EXERCISE, id="2.5", title="find the bugs in a DDP script",
    checks=[_as_in_2_5(c) for c in ex2_2.EXERCISE.checks],
    planted=tuple((name,) for name in PLANTED))
