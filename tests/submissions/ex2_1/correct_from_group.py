import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def setup():
    # rank and world size asked of the group once it exists; explicit env:// rendezvous
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend, init_method="env://")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    device = torch.device(f"cuda:{local_rank}") if backend == "nccl" else torch.device("cpu")
    return dist.get_rank(), local_rank, dist.get_world_size(), device


def build_loader(dataset, batch_size):
    # replicas and rank spelled out, a seed and drop_last=False stated
    sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(),
                                 shuffle=True, seed=0, drop_last=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False, num_workers=0)
