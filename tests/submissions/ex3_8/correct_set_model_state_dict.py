import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard

from ddpcourse.given.ex3_8 import Tower



def build(mesh, path, reshard_after_forward=True):
    """The Tower, sharded block by block over `mesh`, holding the checkpoint's weights; `path` on rank 0 only."""
    with torch.device("meta"):
        model = Tower()  # shapes only: no memory
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)
    model.to_empty(device=mesh.device_type)  # this rank's shards, not yet initialized
    full = torch.load(path, weights_only=True) if path is not None else {}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model


def predict(reshard_after_forward):
    """(all-gathers in one training step, whether the parameters held in the forward pass fit), at 2 ranks."""
    if reshard_after_forward:
        return 17, True  # the root once, each of the 8 blocks before its forward and again before its backward
    return 9, False  # every block once; at the end of forward all of them are gathered: 68 kB + 136 kB
