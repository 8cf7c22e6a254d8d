"""Exercise 1.3's harness: stage_of on the whole model, then pipeline_step on the grader's own split,
with hooks on each stage's first and last layer that record when it computes each micro-batch."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddpcourse.given.ex1_3 import MICRO_BATCHES, OTHER_DEPTHS, batch, bounds, make_layers, make_stack
from ranks.rig import join_group, number, raised


def harness(student, place, rec, seed, **_):
    join_group()
    rank, w = place.rank, place.world_size
    rec.event("stage", **_stage_held(student, make_layers(seed), rank, w))
    for depth in OTHER_DEPTHS:
        rec.event("stage", depth=depth, **_stage_held(student, make_stack(depth, seed), rank, w))
    losses = []
    for case, micro in enumerate(MICRO_BATCHES):
        layers = bounds(w)[rank]
        stage = make_layers(seed)[layers.start:layers.stop]
        _watch(stage, rec)
        x, y = batch(seed, case)
        rec.event("case", index=case, micro_batches=micro)
        loss = student.pipeline_step(stage, x, y, micro)
        rec.event("case_done", index=case)
        rec.keep(f"gradients, step {case}", torch.cat([
            (p.grad if p.grad is not None else torch.full_like(p, float("nan"))).flatten() for p in stage.parameters()]))
        losses.append(number(loss))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {"losses": losses}


def _stage_held(student, model: nn.Sequential, rank: int, world_size: int) -> dict:
    """Which of the model's layers the student's stage_of kept on this rank, or why it failed."""
    layer_of = {id(p): k for k, layer in enumerate(model) for p in layer.parameters()}
    weights = [layer.weight.detach().clone() for layer in model]
    try:
        held = student.stage_of(model, rank, world_size)
        params = list(held.parameters()) if isinstance(held, nn.Module) else \
            [p for m in held for p in m.parameters()]
    except Exception as exc:
        return {"error": raised(exc)}
    layers = []
    for p in params:  # a copy of a layer is still that layer: match its weight by value
        k = layer_of.get(id(p), next((k for k, wt in enumerate(weights) if p.shape == wt.shape
                                      and torch.equal(p.detach(), wt)), None))
        if k is not None and k not in layers:
            layers.append(k)
    return {"layers": layers, "parameters": sum(p.numel() for p in params)}


def _watch(stage: nn.Sequential, rec):
    """Events when the stage starts each micro-batch's forward (is its input ready for backward?)
    and each backward (the gradient of its output arrived)."""
    def forward_starts(_, args):
        x = args[0] if args else None
        rec.event("forward", rows=int(x.shape[0]) if isinstance(x, torch.Tensor) and x.dim() else None,
                  needs_grad=bool(getattr(x, "requires_grad", False)))

    def forward_ends(_, args, out):
        rec.event("forward_done")
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda grad: rec.event("backward"))

    stage[0].register_forward_pre_hook(forward_starts)
    stage[-1].register_forward_hook(forward_ends)
    stage[0].weight.register_post_accumulate_grad_hook(lambda p: rec.event("backward_done"))
