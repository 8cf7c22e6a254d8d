"""Exercise 3.8: a model too large for one rank's device, the device's size, and the run that trains it.

The Tower's embedding and head belong to the root module; each of its blocks is a module of its own.
Its weights are what `tower(seed)` builds; the checkpoint the student loads holds them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddpcourse.data import CLASSES, FEATURES, toy_dataset
from ddpcourse.models import _seeded

WIDTH, DEPTH = 64, 8
# Bytes of parameters a rank's device holds: less than the Tower's 136,204, more than its share at W = 2 or 3
# with one block gathered at a time.
CAPACITY = 112_000
BATCH, STEPS, LR = 12, 2, 1e-2
CHECKPOINT = "tower.pt"


class Block(nn.Module):
    """x + relu(linear(x)): one residual block."""

    def __init__(self, width: int = WIDTH):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.linear(x))


class Tower(nn.Module):
    """An embedding, DEPTH residual blocks, a head: 34,051 parameters, 136,204 bytes in float32."""

    def __init__(self, width: int = WIDTH, depth: int = DEPTH):
        super().__init__()
        self.embed = nn.Linear(FEATURES, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def tower(seed: int) -> Tower:
    """The Tower whose weights the checkpoint holds, whatever the caller's RNG state."""
    return _seeded(Tower, 800 + seed)


def batches(seed: int, world_size: int, rank: int):
    """Each step's rows for this rank: its share of a global batch of BATCH."""
    x, y = toy_dataset(n=BATCH * STEPS, seed=900 + seed).tensors
    return [(x[s * BATCH:(s + 1) * BATCH][rank::world_size], y[s * BATCH:(s + 1) * BATCH][rank::world_size])
            for s in range(STEPS)]
