"""Exercise 3.1: each rank's batch, of a size of its own, and the layer's starting statistics and parameters."""

from __future__ import annotations

import torch

C, L = 4, 3  # channels, and positions per sample: x is (N, C, L)
BATCHES = {1: [5], 2: [3, 6], 3: [5, 1, 8]}  # rows per rank; a rank with a single sample at W = 3
MOMENTUM, EPS = 0.1, 1e-5


def rows(world_size: int) -> list[int]:
    return BATCHES.get(world_size, [3 + r % 4 for r in range(world_size)])


def inputs(seed: int, world_size: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch, shifted and scaled differently on every rank, and the weighting of its loss."""
    g = torch.Generator().manual_seed(6000 + 100 * seed + 10 * world_size + rank)
    n = rows(world_size)[rank]
    x = torch.randn(n, C, L, generator=g) * (1 + rank) + 2 * rank - 1
    x[:, -1] *= 1e-3  # a channel whose variance is below eps: where eps goes in the formula shows
    return x, torch.randn(n, C, L, generator=g)


def layer(seed: int) -> dict[str, torch.Tensor]:
    """The starting running statistics and the affine parameters, the same on every rank."""
    g = torch.Generator().manual_seed(7000 + seed)
    return {"running_mean": torch.randn(C, generator=g), "running_var": torch.rand(C, generator=g) + 0.5,
            "weight": torch.rand(C, generator=g) + 0.5, "bias": torch.randn(C, generator=g)}
