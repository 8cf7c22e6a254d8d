import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Subset


def evaluate(model, dataset, batch_size=16):
    # forgets to combine the ranks' counts
    rank, world_size = dist.get_rank(), dist.get_world_size()
    correct = total = 0
    with torch.no_grad():
        for x, y in DataLoader(Subset(dataset, range(rank, len(dataset), world_size)), batch_size=batch_size):
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return correct / total
