import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard


def setup(model, mesh, lr):
    """Shard the MLP in place (each linear block, then the root); return its Adam."""
    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return torch.optim.Adam(model.parameters(), lr=lr)  # after sharding: the DTensor parameters


def save_full(model, path):
    """Called on every rank: gather the full weights, then rank 0 writes them."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)  # a collective: every rank
    if dist.get_rank() == 0:
        torch.save(state, path)
