"""Exercise 1.2: each rank's tensors, integers held as float32, of lengths the world size may not divide."""

from __future__ import annotations

import torch


def lengths(world_size: int) -> list[int]:
    """A multiple of W, one more than a multiple, one shorter than W (or 1), and a longer one."""
    w = world_size
    return [4 * w, 4 * w + 1, max(w - 1, 1), 250 * w + 3]


def tensor_for(seed: int, rank: int, case: int, length: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_000 * (seed + 1) + 100 * case + rank)
    return torch.randint(-50, 50, (length,), generator=g).float()
