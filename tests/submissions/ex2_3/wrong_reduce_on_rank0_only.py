import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset


def evaluate(model, dataset, batch_size=16):
    # only rank 0 joins the all_reduce: the collective never completes
    rank, world_size = dist.get_rank(), dist.get_world_size()
    counts = torch.zeros(2)
    with torch.no_grad():
        for x, y in DataLoader(Subset(dataset, range(rank, len(dataset), world_size)), batch_size=batch_size):
            counts[0] += (model(x).argmax(1) == y).sum()
            counts[1] += len(y)
    if rank == 0:
        dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()
