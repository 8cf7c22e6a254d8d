"""Exercise 3.6: the model whose training state per rank is predicted and measured, by seed."""

from __future__ import annotations

from torch import nn

SCHEMES = ("DDP", "ZeRO-1", "FSDP")
WIDTHS = {0: (8, 48, 40, 5), 7: (8, 36, 50, 7)}  # layer widths by seed: tensors of unequal sizes, rows W does not divide


def widths(seed: int) -> tuple[int, ...]:
    return WIDTHS.get(seed, (8, 24 + seed % 17, 30 + seed % 13, 3 + seed % 5))


def make(seed: int) -> nn.Sequential:
    """Linear layers of the seed's widths with ReLUs between (only their sizes are counted)."""
    w = widths(seed)
    layers = []
    for a, b in zip(w, w[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def shapes_of(seed: int) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in make(seed).parameters()]
