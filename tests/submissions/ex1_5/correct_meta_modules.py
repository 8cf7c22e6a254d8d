"""Counts parameters by building the block's Linear layers on the meta device; ring share 2(W-1)/W as a float."""
import math

import torch
from torch import nn


def _numel(module):
    return sum(p.numel() for p in module.parameters())


def per_rank_costs(scheme, blocks, d, h, world_size, rows):
    """Bytes on the busiest rank: {"parameters", "gradients", "optimizer", "sent"}."""
    W = world_size
    block = nn.Sequential(nn.Linear(d, h, device="meta"), nn.GELU(), nn.Linear(h, d, device="meta"))
    per_block = _numel(block)
    if scheme == "data":
        n_params = blocks * per_block
    elif scheme == "pipeline":
        n_params = math.ceil(blocks / W) * per_block
    elif scheme == "tensor":
        col = nn.Linear(d, h // W, device="meta")          # column-parallel: weight and bias split
        row = nn.Linear(h // W, d, device="meta")          # row-parallel: weight split, bias whole
        n_params = blocks * (_numel(col) + _numel(row))
    else:
        raise ValueError(scheme)
    ring_share = 2 * (W - 1) / W
    act = rows * d * 4
    if scheme == "data":
        sent = ring_share * n_params * 4
    elif scheme == "pipeline":
        sent = (act if W > 1 else 0) + (act if W > 2 else 0)
    else:
        sent = blocks * 2 * ring_share * act
    p = n_params * 4
    return {"parameters": p, "gradients": p, "optimizer": 2 * p, "sent": sent}
