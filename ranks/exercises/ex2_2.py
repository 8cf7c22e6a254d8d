"""Exercise 2.2's harness: build_loader on the dataset, then the samples and batches it gives each epoch."""

from __future__ import annotations

import torch.distributed as dist
from torch.utils.data import DistributedSampler

from ddpcourse import toy_dataset
from ddpcourse.given.ex2_2 import BATCH, EPOCHS, N
from ranks.rig import join_group, row_index


def harness(student, place, rec, seed, **_):
    join_group()
    dataset = toy_dataset(n=N, seed=seed)
    index = row_index(dataset.tensors[0])
    loader = student.build_loader(dataset, BATCH)
    sampler = loader.sampler
    epochs = []
    for epoch in range(EPOCHS):
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(epoch)  # what a correct training loop does
        seen, sizes = [], []
        for x, *_ in loader:
            seen += [index.get(row.tobytes(), -1) for row in x.detach().cpu().numpy()]
            sizes.append(len(x))
        epochs.append({"indices": seen, "batch_sizes": sizes})
    dist.destroy_process_group()
    return {"sampler": type(sampler).__name__, "distributed": isinstance(sampler, DistributedSampler), "epochs": epochs}
