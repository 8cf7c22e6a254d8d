import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset


def evaluate(model, dataset, batch_size=16):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    share = Subset(dataset, range(rank, len(dataset), world_size))
    device = next(model.parameters()).device
    counts = torch.zeros(2, device=device)
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(share, batch_size=batch_size):
            x, y = x.to(device), y.to(device)
            counts[0] += (model(x).argmax(dim=1) == y).sum()
            counts[1] += len(y)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return (counts[0] / counts[1]).item()
