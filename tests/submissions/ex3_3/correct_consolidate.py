import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def make_optimizer(model, lr):
    """Adam with its state sharded across the ranks (ZeRO stage 1), for the DDP model."""
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)


def save_checkpoint(model, optimizer, path):
    """Called on every rank: the shards go to rank 0, which alone writes model and optimizer."""
    optimizer.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()}, path)
