import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    # no_sync around every micro-batch, the last of the window too: gradients never cross ranks
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync():
            (F.cross_entropy(model(x), y) / accum_steps).backward()
        if (i + 1) % accum_steps == 0:
            optimizer.step()
            optimizer.zero_grad()
