"""Exercise 3.7: one model, the same on every rank; each step, each rank its shard of a global batch."""

from __future__ import annotations

from ddpcourse import make_mlp, toy_dataset

BATCH, STEPS, LR = 12, 3, 1e-2  # a global batch of 12 splits evenly over 1, 2 or 3 ranks


def model(seed: int):
    """Three linear layers, 1,443 parameters in all (odd: two ranks cannot split them equally)."""
    return make_mlp(400 + seed)


def shard(seed: int, step: int, world_size: int, rank: int):
    x, y = toy_dataset(n=BATCH * STEPS, seed=500 + seed).tensors
    batch = slice(step * BATCH, (step + 1) * BATCH)
    return x[batch][rank::world_size], y[batch][rank::world_size]
