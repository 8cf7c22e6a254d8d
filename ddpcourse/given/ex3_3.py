"""Exercise 3.3: the global batches of the run, each rank's share of them, and where the checkpoint goes."""

from __future__ import annotations

from ddpcourse import toy_dataset

LR, STEPS, GLOBAL_BATCH = 1e-2, 4, 12
CHECKPOINT = "zero_checkpoint.pt"


def data(seed: int):
    return toy_dataset(n=GLOBAL_BATCH * (STEPS + 1), seed=300 + seed).tensors


def rows(step: int, rank: int, world_size: int) -> slice:
    share = GLOBAL_BATCH // world_size
    return slice(step * GLOBAL_BATCH + rank * share, step * GLOBAL_BATCH + (rank + 1) * share)
