"""Exercise 2.3's harness: evaluate(model, dataset), every sample the model scores recorded."""

from __future__ import annotations

import numbers

import torch
import torch.distributed as dist

from ddpcourse import make_model, toy_dataset
from ddpcourse.given.ex2_3 import N
from ranks.rig import device_for, join_group, row_index


def harness(student, place, rec, seed, **_):
    device = device_for(place)  # before the group: nccl binds to the current device
    join_group()
    dataset = toy_dataset(n=N, seed=seed)
    model = make_model(seed + 1).to(device)
    index = row_index(dataset.tensors[0])
    plain_forward = model.forward

    def forward(x, *args, **kwargs):  # model(x) and model.forward(x) alike: a hook would see only the first
        rec.event("scored", indices=[index.get(row.tobytes(), -1) for row in x.detach().cpu().numpy()])
        return plain_forward(x, *args, **kwargs)

    model.forward = forward
    value = student.evaluate(model, dataset)
    dist.destroy_process_group()
    rec.event("returned", tensor=isinstance(value, torch.Tensor))
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    return value if isinstance(value, numbers.Real) and not isinstance(value, bool) else repr(value)[:200]
