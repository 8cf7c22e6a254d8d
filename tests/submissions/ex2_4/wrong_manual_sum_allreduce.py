import torch.distributed as dist
import torch.nn.functional as F


def train_accumulate(model, optimizer, micro_batches, accum_steps):
    # accumulates locally, then syncs by hand with a SUM that is never divided by the world size
    for start in range(0, len(micro_batches), accum_steps):
        window = micro_batches[start:start + accum_steps]
        with model.no_sync():
            for x, y in window:
                (F.cross_entropy(model(x), y) / len(window)).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
        optimizer.step()
        optimizer.zero_grad()
