"""Exercise 2.1's harness: setup(), what the rank sees of its process group, then build_loader's epochs."""

from __future__ import annotations

import os

import torch.distributed as dist

from ddpcourse import toy_dataset
from ddpcourse.given.ex2_1 import BATCH, EPOCHS, N
from ranks.rig import join_group, row_index


def harness(student, place, rec, seed, **_):
    returned = student.setup()
    seen = {
        "returned": [str(v) for v in returned] if isinstance(returned, (tuple, list)) else repr(returned),
        "types": [_type_of(v) for v in returned] if isinstance(returned, (tuple, list)) else [],
        "env": {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE")},
        "initialized": dist.is_initialized(),
        "backend": dist.get_backend() if dist.is_initialized() else None,
    }
    if not seen["initialized"]:
        join_group()  # the loader is judged on its own: a setup() that joined nothing is charged once
    seen.update(_epochs(student, seed))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return seen


def _type_of(value) -> str:
    """"int" for the built-in int only; any other type by its name (a class of the student's named int, as such)."""
    if type(value) is int:
        return "int"
    name = type(value).__name__
    return name if name != "int" else "class named int"


def _epochs(student, seed) -> dict:
    """The samples and batch sizes build_loader's loader gives in each epoch, set_epoch called first as a training loop does."""
    dataset = toy_dataset(n=N, seed=seed)
    index = row_index(dataset.tensors[0])
    loader = student.build_loader(dataset, BATCH)
    sampler = getattr(loader, "sampler", None)
    epochs = []
    for epoch in range(EPOCHS):
        if callable(getattr(sampler, "set_epoch", None)):
            sampler.set_epoch(epoch)
        seen, sizes = [], []
        for x, *_ in loader:
            seen += [index.get(row.tobytes(), -1) for row in x.detach().cpu().numpy()]
            sizes.append(len(x))
        epochs.append({"indices": seen, "batch_sizes": sizes})
    return {"sampler": type(sampler).__name__, "epochs": epochs}
