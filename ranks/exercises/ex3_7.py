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
    share["held"] = _held(optimizer, params)
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


def _held(optimizer, params, limit: int = 16) -> list[list[float]]:
    """The floating-point tensors the optimizer object keeps (in its attributes, two levels down), other than the
    parameters and their gradients, as numbers: what state a rank holds, whatever it says it holds."""
    skip = {id(p) for p in params} | {id(p.grad) for p in params if p.grad is not None}
    found, seen = [], set()

    def visit(value, depth):
        if len(found) >= limit or depth > 3:
            return
        if isinstance(value, torch.Tensor):
            if value.dtype.is_floating_point and id(value) not in skip and id(value) not in seen and value.numel() > 1:
                seen.add(id(value))
                found.append(value.detach().double().flatten()[:100_000].tolist())
        elif isinstance(value, dict):
            for item in list(value.values())[:1000]:
                visit(item, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value[:1000]:
                visit(item, depth + 1)
        elif depth == 0 or isinstance(value, torch.optim.Optimizer):
            for item in list(vars(value).values()):
                visit(item, depth + 1)

    try:
        visit(optimizer, 0)
    except Exception:
        pass
    return found

