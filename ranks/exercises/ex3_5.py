"""Exercise 3.5's harness: the MLP sharded with FSDP2, the previous job's checkpoint loaded with the student's
load (if there is one), a few steps, then the student's save; the full parameters kept after each."""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddpcourse import make_mlp
from ddpcourse.given.ex3_3 import LR, rows
from ddpcourse.given.ex3_5 import CHAIN, STEPS_PER_JOB, data, saved_by
from ranks.exercises.ex3_4 import _full
from ranks.rig import device_for, join_group, record_call


def harness(student, place, rec, seed, **_):
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    join_group()
    rank, w = place.rank, place.world_size
    device = device_for(place)
    model = make_mlp(0).to(device)
    mesh = init_device_mesh(device.type, (w,))
    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    chain = Path.cwd().parent / CHAIN
    chain.mkdir(exist_ok=True)
    # the checkpoints of the jobs before this one, the last one saved last
    earlier = sorted((p for p in chain.glob("saved_by_*") if p.name != saved_by(w)), key=lambda p: p.stat().st_mtime_ns)
    rec.event("resume", previous=earlier[-1].name.removeprefix("saved_by_") if earlier else None,
              jobs_before=len(earlier))
    if earlier:
        record_call(rec, "loaded", student.load, model, optimizer, str(earlier[-1]), passes=(NotImplementedError,))
        rec.keep("after load", _full(model))
    x, y = data(seed)
    first = len(earlier) * STEPS_PER_JOB
    for k in range(first, first + STEPS_PER_JOB):
        optimizer.zero_grad()
        part = rows(k, rank, w)
        F.cross_entropy(model(x[part].to(device)), y[part].to(device)).backward()
        optimizer.step()
        rec.keep("after step", _full(model))
    record_call(rec, "saved", student.save, model, optimizer, str(chain / saved_by(w)), passes=(NotImplementedError,))
    dist.barrier()  # every rank done saving; a rank left in a collective of the save shows as a hang here
    dist.destroy_process_group()
