import os

import torch
import torch.distributed as dist


def setup():
    # rank and world size asked of the group once it exists; explicit env:// rendezvous
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, init_method="env://")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
    return dist.get_rank(), local_rank, dist.get_world_size(), device
