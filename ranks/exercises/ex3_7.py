"""Exercise 3.7's harness: ZeroAdam(params, lr) stepped after each backward; its share and moments read at the end."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse.given.ex3_7 import LR, STEPS, model, shard
from ranks.rig import flat, join_group, raised


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    net = model(seed)
    params = list(net.parameters())
    optimizer = student.ZeroAdam(params, lr=LR)
    for step in range(STEPS):
        x, y = shard(seed, step, w, rank)
        for p in params:
            p.grad = None
        F.cross_entropy(net(x), y).backward()
        rec.event("phase", step=step, phase="step")
        optimizer.step()
        rec.event("phase", step=step, phase="stepped")
        rec.keep(f"parameters after step {step}", flat(params))
    share = _share(optimizer)
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return share


def _share(optimizer) -> dict:
    """What the optimizer says it owns, and the moments it keeps for it, as plain numbers (or the error)."""
    try:
        start, stop = (int(v) for v in optimizer.owned())
        exp_avg, exp_avg_sq = (torch.as_tensor(m).detach().double().flatten() for m in optimizer.moments())
    except Exception as exc:
        return {"error": raised(exc)}
    return {"owned": [start, stop], "exp_avg": exp_avg[:5000].tolist(), "exp_avg_sq": exp_avg_sq[:5000].tolist(),
            "moment_sizes": [exp_avg.numel(), exp_avg_sq.numel()]}
