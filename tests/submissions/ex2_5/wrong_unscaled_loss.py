import contextlib

import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    # forgets to divide by accum_steps: the window's gradient is a sum, not a mean
    for i, (x, y) in enumerate(micro_batches):
        last = (i + 1) % accum_steps == 0
        with contextlib.nullcontext() if last else model.no_sync():
            F.cross_entropy(model(x), y).backward()
        if last:
            optimizer.step()
            optimizer.zero_grad()
