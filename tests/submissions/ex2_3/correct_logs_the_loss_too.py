import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, Subset


def evaluate(model, dataset, batch_size=16):
    # correct: a second forward pass of each batch logs the loss; every sample is still scored by one rank only
    rank, world = dist.get_rank(), dist.get_world_size()
    share = Subset(dataset, range(rank, len(dataset), world))
    device = next(model.parameters()).device
    stats = torch.zeros(3, dtype=torch.float64, device=device)   # correct, seen, summed loss
    model.eval()
    with torch.no_grad():
        for x, y in DataLoader(share, batch_size=batch_size):
            x, y = x.to(device), y.to(device)
            stats[0] += (model(x).argmax(1) == y).sum()
            stats[1] += len(y)
            stats[2] += F.cross_entropy(model(x), y, reduction="sum")
    dist.all_reduce(stats)
    if rank == 0:
        print(f"eval loss {stats[2].item() / stats[1].item():.4f}")
    return (stats[0] / stats[1]).item()
