import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import distribute_tensor

from ddpcourse.given.ex3_8 import Tower



def build(mesh, path, reshard_after_forward=True):
    with torch.device("meta"):
        model = Tower()
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=mesh.device_type)
    names = [name for name, _ in model.named_parameters()]
    total = sum(p.numel() for p in model.parameters())
    if path is not None:
        weights = torch.load(path, weights_only=True)
        everything = torch.cat([weights[name].flatten() for name in names])
    else:
        everything = torch.empty(total)
    dist.broadcast(everything, src=0)  # the whole model at once, on every rank
    with torch.no_grad():
        at = 0
        for p in model.parameters():
            full = everything[at:at + p.numel()].view(p.shape)
            p.to_local().copy_(distribute_tensor(full, mesh, p.placements, src_data_rank=None).to_local())
            at += p.numel()
    return model


def predict(reshard_after_forward):
    """(all-gathers in one training step, whether the parameters held in the forward pass fit), at 2 ranks."""
    if reshard_after_forward:
        return 17, True  # the root once, each of the 8 blocks before its forward and again before its backward
    return 9, False  # every block once; at the end of forward all of them are gathered: 68 kB + 136 kB
