import torch
import torch.distributed as dist
from torch.distributed.optim import ZeroRedundancyOptimizer

WRITER = 0


def make_optimizer(model, lr):
    params = [p for p in model.module.parameters() if p.requires_grad]
    return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.Adam, parameters_as_bucket_view=True,
                                   lr=lr, betas=(0.9, 0.999))


def save_checkpoint(model, optimizer, path):
    optimizer.consolidate_state_dict(to=WRITER)  # a collective: every rank sends its shard
    if dist.get_rank() != WRITER:
        return
    checkpoint = {"model": {k: v.detach().clone() for k, v in model.module.state_dict().items()},
                  "optimizer": optimizer.state_dict()}
    torch.save(checkpoint, path)
