"""Exercise 1.3: a stack of layers of different widths, a batch, and the grader's own split into stages."""

from __future__ import annotations

import torch
from torch import nn

WIDTHS = (6, 10, 7, 12, 8, 9, 5, 4)  # 7 layers: no world size of 2 or 3 divides them evenly
ROWS = 12
MICRO_BATCHES = (3, 4)  # one step with each; the report draws the last


class TanhLinear(nn.Linear):
    """One layer of the pipeline's model: tanh(x A^T + b)."""

    def forward(self, x):
        return torch.tanh(super().forward(x))


def make_layers(seed: int) -> nn.Sequential:
    torch.manual_seed(100 + seed)
    return nn.Sequential(*(TanhLinear(a, b) for a, b in zip(WIDTHS, WIDTHS[1:])))


OTHER_DEPTHS = (5, 11)  # stage_of is judged on stacks of these many layers too: a split that fits 7 only shows


def make_stack(depth: int, seed: int) -> nn.Sequential:
    """Another stack of ``depth`` layers of different widths, for stage_of alone."""
    torch.manual_seed(300 + depth + seed)
    widths = [3 + (5 * k + depth) % 7 for k in range(depth + 1)]
    return nn.Sequential(*(TanhLinear(a, b) for a, b in zip(widths, widths[1:])))


def batch(seed: int, case: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(500 + 10 * seed + case)
    return torch.randn(ROWS, WIDTHS[0], generator=g), torch.rand(ROWS, WIDTHS[-1], generator=g) * 2 - 1


def bounds(world_size: int) -> list[range]:
    """The grader's own split: consecutive layers, as even as possible."""
    return [range(int(r[0]), int(r[-1]) + 1) for r in torch.tensor_split(torch.arange(len(WIDTHS) - 1), world_size)]
