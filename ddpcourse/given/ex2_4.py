"""Exercise 2.4: each rank's micro-batches and the accumulation windows they fall into."""

from __future__ import annotations

import torch

from ddpcourse import toy_dataset

# 7 micro-batches of 4 per rank in windows of 3: windows of 3, 3 and 1, so three optimizer steps.
# The short last window is where a loop that only steps on full windows, or that always divides by
# accum_steps, goes wrong.
MICRO, STEPS, ACCUM, LR = 4, 7, 3, 0.1
SIZES = [min(ACCUM, STEPS - start) for start in range(0, STEPS, ACCUM)]
WINDOWS = len(SIZES)


def micro_batches(seed: int, world_size: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = toy_dataset(n=MICRO * STEPS * world_size, seed=seed).tensors
    mine = torch.arange(rank, len(x), world_size)
    return [(x[chunk], y[chunk]) for chunk in mine.split(MICRO)]
