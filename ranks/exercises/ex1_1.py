"""Exercise 1.1's harness: broadcast_parameters(model), then average_gradients(model) each step."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse import make_model
from ddpcourse.given.ex1_1 import LR, STEPS, head_of, make_two_heads, shard, start_seed
from ranks.rig import flat, flat_grads, join_group, raised


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    model = make_model(start_seed(seed, rank))
    student.broadcast_parameters(model)
    rec.keep("after broadcast_parameters", flat(model.parameters()))
    for step in range(STEPS):
        x, y = shard(seed, step, w, rank)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        student.average_gradients(model)
        rec.keep(f"gradients at step {step}", flat_grads(model))
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
        rec.keep(f"parameters after step {step}", flat(model.parameters()))
    frozen = _with_a_frozen_parameter(student, model, *shard(seed, 0, w, rank))
    # A function that fails on a None gradient would fail here at a different parameter on each rank, and
    # leave the others waiting in a collective: that mistake is the frozen parameter's, told there.
    unused = None if frozen else _with_a_head_unused(student, seed, rank, *shard(seed, 0, w, rank))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {"frozen": frozen, "unused": unused}


def _with_a_frozen_parameter(student, model, x, y) -> str | None:
    """What went wrong when one parameter has no gradient (it is frozen), or None.

    Frozen the same way on every rank, so every rank fails at the same point if it fails at all,
    and the collectives stay matched for the rest of the run.
    """
    frozen = model.net[0].bias
    frozen.requires_grad_(False)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    try:
        student.average_gradients(model)
    except Exception as exc:
        return f"raised {raised(exc)}"
    if frozen.grad is not None:  # zeros too: an optimizer with weight decay or momentum would still move it
        nonzero = bool(torch.count_nonzero(frozen.grad))
        return f"gave the frozen parameter (net.0.bias) a gradient{'' if nonzero else ' of zeros'}, where it has none"
    return None


def _with_a_head_unused(student, seed, rank, x, y) -> list[float] | str:
    """The gradients after average_gradients when this rank's forward used one head of two (head_of):
    the other head's parameters require a gradient but get none here. NaN where a gradient is None."""
    model = make_two_heads(seed)
    F.cross_entropy(model(x, head_of(rank)), y).backward()
    try:
        student.average_gradients(model)
    except Exception as exc:
        return f"raised {raised(exc)}"
    return flat_grads(model).tolist()
