"""Exercise 3.3's harness: a DDP MLP trained with the student's optimizer, the Adam state each rank holds
measured, save_checkpoint on every rank, then one more step."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse import make_mlp
from ddpcourse.given.ex3_3 import CHECKPOINT, LR, STEPS, data, rows
from ranks.rig import join_group, record_call


def harness(student, place, rec, seed, **_):
    from torch.nn.parallel import DistributedDataParallel as DDP

    join_group()
    x, y = data(seed)
    model = DDP(make_mlp(0))
    optimizer = student.make_optimizer(model, LR)

    def step(k: int):
        optimizer.zero_grad()
        part = rows(k, place.rank, place.world_size)
        F.cross_entropy(model(x[part]), y[part]).backward()
        optimizer.step()

    for k in range(STEPS):
        step(k)
    rec.event("optimizer_state", **_state_held(model, optimizer))
    record_call(rec, "saved", student.save_checkpoint, model, optimizer, str(Path.cwd() / CHECKPOINT))
    dist.barrier()  # every rank done saving; a rank left in a collective of the save shows as a hang here
    step(STEPS)  # the step a resumed run must take the same way
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()


def _state_held(model, optimizer) -> dict:
    """Which of the model's parameters this rank's optimizer holds state for, and its bytes."""
    local = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer steps a local optimizer
    index = {id(p): i for i, p in enumerate(model.module.parameters())}
    held = {}
    for param, state in getattr(local, "state", {}).items():
        tensors = [t for t in state.values() if isinstance(t, torch.Tensor) and t.dim() > 0] if isinstance(state, dict) else []
        if id(param) in index and tensors:
            held[str(index[id(param)])] = sum(t.numel() * t.element_size() for t in tensors)
    return {"optimizer": type(optimizer).__name__, "local": type(local).__name__, "held": held}
