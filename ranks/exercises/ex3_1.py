"""Exercise 3.1's harness: sync_batch_norm forward and backward on each rank's own batch."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddpcourse.given.ex3_1 import EPS, MOMENTUM, inputs, layer
from ranks.rig import join_group, keep_parts


def harness(student, place, rec, seed, **_):
    join_group()
    x, weighting = inputs(seed, place.world_size, place.rank)
    x.requires_grad_()
    state = layer(seed)
    rec.event("call")
    y = student.sync_batch_norm(x, state["running_mean"], state["running_var"], state["weight"], state["bias"],
                                MOMENTUM, EPS)
    rec.event("backward")
    ok = isinstance(y, torch.Tensor) and y.shape == x.shape
    if ok and y.requires_grad:
        (y * weighting).sum().backward()  # each rank's loss is its own part of the job's total
    rec.event("done")
    keep_parts(rec, "output, gradient, running statistics",
               zip((y if ok else None, x.grad, state["running_mean"], state["running_var"]),
                   (x, x, state["running_mean"], state["running_var"])))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {"output": "missing" if y is None else "shape" if not ok else "no grad" if not y.requires_grad else "ok"}
