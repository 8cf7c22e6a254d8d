"""Exercise 1.1: every rank starts from weights of its own; each step, each rank its shard of a global batch."""

from __future__ import annotations

import torch
from torch import nn

from ddpcourse import toy_dataset
from ddpcourse.data import CLASSES, FEATURES
from ddpcourse.models import _seeded

BATCH, STEPS, LR = 12, 3, 0.2  # a global batch of 12 splits evenly over 1, 2 or 3 ranks


def start_seed(seed: int, rank: int) -> int:
    return 1000 * (seed + 1) + rank  # a different initial model on every rank


def shard(seed: int, step: int, world_size: int, rank: int):
    x, y = toy_dataset(n=BATCH * STEPS, seed=seed).tensors
    batch = slice(step * BATCH, (step + 1) * BATCH)
    return x[batch][rank::world_size], y[batch][rank::world_size]


class TwoHeads(nn.Module):
    """A trunk and two heads of the same shape; each rank's forward uses one head: the other gets no gradient."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU())
        self.head_a = nn.Linear(16, CLASSES)
        self.head_b = nn.Linear(16, CLASSES)

    def forward(self, x: torch.Tensor, head: str) -> torch.Tensor:
        return (self.head_a if head == "a" else self.head_b)(self.trunk(x))


def make_two_heads(seed: int) -> TwoHeads:
    return _seeded(TwoHeads, 3000 + seed)


def head_of(rank: int) -> str:
    """The head a rank's forward uses: a on even ranks, b on odd ones."""
    return "a" if rank % 2 == 0 else "b"
