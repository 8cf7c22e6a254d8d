# Shards Adam correctly, then saves a checkpoint built to choke a reader: lists nested 100 deep and a
# dict of 200 000 keys where the optimizer's state should be.
import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer


def make_optimizer(model, lr):
    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)


def save_checkpoint(model, optimizer, path):
    optimizer.consolidate_state_dict(to=0)
    if dist.get_rank() == 0:
        deep = []
        for _ in range(100):
            deep = [deep]
        wide = {f"k{i}": i for i in range(200_000)}
        torch.save({"model": model.module.state_dict(), "optimizer": {"state": deep, "param_groups": wide}}, path)
