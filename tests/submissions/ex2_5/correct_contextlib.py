import contextlib

import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    for i, (x, y) in enumerate(micro_batches):
        last_of_window = (i + 1) % accum_steps == 0
        context = contextlib.nullcontext() if last_of_window else model.no_sync()
        with context:
            loss = F.cross_entropy(model(x), y) / accum_steps
            loss.backward()
        if last_of_window:
            optimizer.step()
            optimizer.zero_grad()
