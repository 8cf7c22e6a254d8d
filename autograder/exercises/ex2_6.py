"""Exercise 2.6: find the bugs in a DDP training script.

The script handed out has the same contract as 2.3's (the toy dataset, TinyNet, one checkpoint)
and several mistakes of the kinds lesson 2 taught, so 2.3's checks judge it: each names the
symptom of a bug that is left (two checkpoint writers, the same order every epoch, training that
differs from the reference by a factor of the world size...), never the line it is on. Their hints,
which say what the fix is, are left out: finding it is the exercise.
"""

from __future__ import annotations

import dataclasses

from autograder.exercises import ex2_3

EXERCISE = dataclasses.replace(
    ex2_3.EXERCISE, id="2.6", title="find the bugs in a DDP script",
    checks=[c if c.name == "the script runs to the end on every rank" else dataclasses.replace(c, hint="")
            for c in ex2_3.EXERCISE.checks])
