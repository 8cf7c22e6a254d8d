"""Exercise 3.4's harness: setup shards the MLP, a few steps keep the full parameters after each (gathered
here, so the student's code is judged on what the model holds), how each parameter is stored is
recorded, then save_full on every rank."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse import make_mlp
from ddpcourse.given.ex3_3 import data, rows
from ddpcourse.given.ex3_4 import CHECKPOINT, LR, STEPS
from ranks.rig import device_for, join_group, record_call


def harness(student, place, rec, seed, **_):
    from torch.distributed.device_mesh import init_device_mesh

    join_group()
    device = device_for(place)
    mesh = init_device_mesh(device.type, (place.world_size,))
    model = make_mlp(0).to(device)
    optimizer = student.setup(model, mesh, LR)
    rec.event("sharded", **_storage(model))
    x, y = data(seed)
    for k in range(STEPS):
        optimizer.zero_grad()
        part = rows(k, place.rank, place.world_size)
        F.cross_entropy(model(x[part].to(device)), y[part].to(device)).backward()
        optimizer.step()
        rec.keep("after step", _full(model))
    record_call(rec, "saved", student.save_full, model, str(Path.cwd() / CHECKPOINT))
    dist.barrier()  # every rank done saving; a rank left in a collective of the save shows as a hang here
    dist.destroy_process_group()


def _full(model) -> torch.Tensor:
    """The whole parameters, flattened; gathering a sharded one is a collective every rank makes here."""
    parts = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in model.parameters()]
    return torch.cat([p.detach().double().cpu().flatten() for p in parts])


def _storage(model) -> dict:
    """How this rank stores each parameter, and which modules fully_shard made FSDP modules."""
    from torch.distributed.fsdp import FSDPModule

    params = [{"name": name, "dtensor": hasattr(p, "to_local"), "placements": str(getattr(p, "placements", "")),
               "numel": p.numel(), "local": p.to_local().numel() if hasattr(p, "to_local") else p.numel()}
              for name, p in model.named_parameters()]
    fsdp = [name for name, m in model.named_modules() if isinstance(m, FSDPModule)]
    return {"params": params, "fsdp": fsdp}
