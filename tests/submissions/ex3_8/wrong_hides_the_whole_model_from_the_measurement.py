import torch
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.utils._python_dispatch import _disable_current_modes  # hides what it allocates from a dispatch mode

from ddpcourse.given.ex3_8 import Tower


def build(mesh, path, reshard_after_forward=True):
    with _disable_current_modes():
        model = Tower()
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)
    full = torch.load(path, weights_only=True) if path is not None else {}
    set_model_state_dict(model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    return model


def predict(reshard_after_forward):
    return (17, True) if reshard_after_forward else (9, False)
