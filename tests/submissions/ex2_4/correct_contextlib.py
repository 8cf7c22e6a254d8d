import contextlib

import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    for i, (x, y) in enumerate(micro_batches):
        start = i - i % accum_steps
        size = min(accum_steps, len(micro_batches) - start)  # the last window may be short
        last_of_window = i == start + size - 1
        context = contextlib.nullcontext() if last_of_window else model.no_sync()
        with context:
            loss = F.cross_entropy(model(x), y) / size
            loss.backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad()
