import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    # right result, but gradients are all-reduced after every micro-batch
    for i, (x, y) in enumerate(micro_batches):
        (F.cross_entropy(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
