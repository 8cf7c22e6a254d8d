"""Exercise 2.4's harness: train_accumulate on a DDP model, each micro-batch's forward pass recorded."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpcourse import make_model
from ddpcourse.given.ex2_4 import ACCUM, LR, micro_batches
from ranks.rig import device_for, join_group


def harness(student, place, rec, seed, **_):
    device = device_for(place)  # before the group: nccl binds to the current device
    join_group()
    model = DDP(make_model(seed).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    batches = [(x.to(device), y.to(device)) for x, y in micro_batches(seed, place.world_size, place.rank)]
    which = {x[0].cpu().numpy().tobytes(): k for k, (x, _) in enumerate(batches)}
    model.module.register_forward_pre_hook(lambda module, args: rec.event(
        "micro_batch", index=which.get(args[0][:1].detach().cpu().reshape(-1).numpy().tobytes(), -1)))
    student.train_accumulate(model, optimizer, batches, ACCUM)
    dist.destroy_process_group()
