"""Exercise 3.5: the chain of jobs (their world sizes, in order), their data, and where each one saves."""

from __future__ import annotations

from ddpcourse import toy_dataset

STEPS_PER_JOB = 2
CHAIN_SIZES = (2, 3, 1)  # grown from 2 ranks to 3, then shrunk to 1
CHAIN = "dcp"  # beside the launches' work directories: what one job saves, the next one loads


def data(seed: int):
    return toy_dataset(n=12 * STEPS_PER_JOB * 4, seed=500 + seed).tensors


def saved_by(world_size: int) -> str:
    return f"saved_by_{world_size}"
