"""Exercise 1.4's harness: shard_weights on the whole weights, then tensor_parallel_mlp forward and backward
on the grader's own shards, the forward and backward passes marked."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ddpcourse.given.ex1_4 import D, ROWS, columns, inputs, weights
from ranks.rig import join_group, keep_parts, raised


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    rec.event("shards", **_shards_held(student, *weights(seed, 0), rank, w))
    a, b = (t.clone().requires_grad_() for t in _grader_shards(seed, rank, w))
    x, weighting = inputs(seed)
    x.requires_grad_()
    rec.event("forward")
    y = student.tensor_parallel_mlp(x, a, b)
    rec.event("backward")
    ok = isinstance(y, torch.Tensor) and tuple(y.shape) == (ROWS, D)
    if ok and y.requires_grad:
        (y * weighting).sum().backward()
    rec.event("backward_done")
    keep_parts(rec, "output and gradients", zip((y if ok else None, x.grad, a.grad, b.grad), (weighting, x, a, b)))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {"output": "missing" if y is None else "shape" if not ok else "no grad" if not y.requires_grad else "ok",
            "shape": list(y.shape) if isinstance(y, torch.Tensor) else None}


def _grader_shards(seed: int, rank: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    A, B = weights(seed, 1)
    mine = columns(rank, world_size)
    return A[:, mine].clone(), B[mine, :].clone()  # the whole A and B end here, before the student's code runs


def _shards_held(student, A, B, rank, world_size) -> dict:
    """Which of A's columns and B's rows the student's shards hold, in order, or why it failed."""
    try:
        a, b = student.shard_weights(A.clone(), B.clone(), rank, world_size)
        a, b = torch.as_tensor(a).detach(), torch.as_tensor(b).detach()
    except Exception as exc:
        return {"error": raised(exc)}

    def which(parts: torch.Tensor, whole: torch.Tensor) -> list[int | None]:
        return [next((k for k in range(whole.shape[0]) if torch.equal(part, whole[k])), None) for part in parts]

    held = {"a_shape": list(a.shape), "b_shape": list(b.shape)}
    if a.dim() == 2 and a.shape[0] == D:
        held["columns"] = which(a.T, A.T)
    if b.dim() == 2 and b.shape[1] == D:
        held["rows"] = which(b, B)
    return held
