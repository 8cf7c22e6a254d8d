"""Exercise 2.6: a deeper model whose gradients fill several buckets, a bucket size per world size."""

from __future__ import annotations

from torch import nn

from ddpcourse import toy_dataset
from ddpcourse.data import CLASSES, FEATURES
from ddpcourse.models import _seeded

BATCH, STEPS, LR = 12, 3, 0.1  # a global batch of 12 splits evenly over 1, 2 or 3 ranks
# Elements per bucket at each world size: different caps give different buckets, so one fixed cap shows.
BUCKET_NUMEL = {1: 700, 2: 1000, 3: 300}


def make_deep_model(seed: int) -> nn.Sequential:
    """Four linear layers of unequal sizes (8 parameters, 1,923 numbers), the weights set by ``seed``."""
    return _seeded(lambda: nn.Sequential(nn.Linear(FEATURES, 24), nn.ReLU(), nn.Linear(24, 40), nn.ReLU(),
                                         nn.Linear(40, 16), nn.ReLU(), nn.Linear(16, CLASSES)), seed)


def start_seed(seed: int, rank: int) -> int:
    return 2000 * (seed + 1) + rank  # a different initial model on every rank


def shard(seed: int, step: int, world_size: int, rank: int):
    x, y = toy_dataset(n=BATCH * STEPS, seed=seed).tensors
    batch = slice(step * BATCH, (step + 1) * BATCH)
    return x[batch][rank::world_size], y[batch][rank::world_size]
