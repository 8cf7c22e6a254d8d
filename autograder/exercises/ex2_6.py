"""Exercise 2.6: find the bugs in a DDP training script.

The script handed out has the same contract as 2.3's (the toy dataset, TinyNet, one checkpoint)
and several mistakes of the kinds lesson 2 taught, so 2.3's checks judge it: each names the
symptom of a bug that is left (two checkpoint writers, the same order every epoch, training that
differs from the reference by a factor of the world size...), never the line it is on nor its fix:
finding that is the exercise. The points are the planted bugs' (the script as handed out earns only
what it already does right, a sixth of the whole); 2.3's other checks stay, so a fix that breaks
something else still costs.
"""

from __future__ import annotations

import dataclasses
import functools

from autograder.exercises import ex2_3

WRITER = "exactly one checkpoint writer: global rank 0"
REFERENCE = "equal to the single-process reference trained on the same global batches"
KEYS = "checkpoint keys have no 'module.' prefix and load strictly into the plain model"
DESTROYED = "process group destroyed at the end"
ORDER = "the order of the samples changes every epoch"  # 2.3's name says the fix
PLANTED = (WRITER, ORDER, REFERENCE, KEYS, DESTROYED)
BUG_POINTS = 4
OTHER_POINTS = {"DDP on GPUs: device_ids=[local_rank]": 0}  # the others: half a point each


def _as_in_2_6(check):
    if check.name == ex2_3.ORDER:
        check = dataclasses.replace(check, name=ORDER, verify=functools.partial(check.verify, why=False))
    points = BUG_POINTS if check.name in PLANTED else OTHER_POINTS.get(check.name, 0.5)
    return dataclasses.replace(check, points=points, hint="", hint_for=None)


EXERCISE = dataclasses.replace(
    ex2_3.EXERCISE, id="2.6", title="find the bugs in a DDP script",
    checks=[_as_in_2_6(c) for c in ex2_3.EXERCISE.checks],
    planted=tuple((name,) for name in PLANTED))
