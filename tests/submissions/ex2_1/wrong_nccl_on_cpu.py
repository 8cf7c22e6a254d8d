import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def setup():
    # nccl needs GPUs: on a CPU-only machine this cannot work
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    return int(os.environ["RANK"]), local_rank, int(os.environ["WORLD_SIZE"]), torch.device("cuda", local_rank)


def build_loader(dataset, batch_size):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
