"""Exercise 1.1: every rank starts from weights of its own; each step, each rank its shard of a global batch."""

from __future__ import annotations

from ddpcourse import toy_dataset

BATCH, STEPS, LR = 12, 3, 0.2  # a global batch of 12 splits evenly over 1, 2 or 3 ranks


def start_seed(seed: int, rank: int) -> int:
    return 1000 * (seed + 1) + rank  # a different initial model on every rank


def shard(seed: int, step: int, world_size: int, rank: int):
    x, y = toy_dataset(n=BATCH * STEPS, seed=seed).tensors
    batch = slice(step * BATCH, (step + 1) * BATCH)
    return x[batch][rank::world_size], y[batch][rank::world_size]
