import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard


def setup(model, mesh, lr):
    blocks = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    for block in blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=True)
    fully_shard(model, mesh=mesh)
    return torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8)


def save_full(model, path):
    full = {name: tensor.full_tensor().cpu() for name, tensor in model.state_dict().items()}  # every rank gathers
    if dist.get_rank() == 0:
        torch.save(full, path)
