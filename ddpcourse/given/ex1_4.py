"""Exercise 1.4: an MLP's two weight matrices, its input, and the grader's own split of the hidden units."""

from __future__ import annotations

import torch

D, HIDDEN, ROWS = 8, 24, 5  # HIDDEN splits evenly over 1 to 4 ranks


def weights(seed: int, purpose: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3000 + 10 * seed + purpose)
    return torch.randn(D, HIDDEN, generator=g) / D ** 0.5, torch.randn(HIDDEN, D, generator=g) / HIDDEN ** 0.5


def inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The input x, the same on every rank, and the weighting of the output that makes the loss."""
    g = torch.Generator().manual_seed(4000 + seed)
    return torch.randn(ROWS, D, generator=g), torch.randn(ROWS, D, generator=g)


def columns(rank: int, world_size: int) -> slice:
    """The grader's own split: consecutive columns of A (rows of B)."""
    per = HIDDEN // world_size
    return slice(rank * per, (rank + 1) * per)
