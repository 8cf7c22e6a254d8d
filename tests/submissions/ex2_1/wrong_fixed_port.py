import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def setup():
    # a hard-coded rendezvous: two jobs on one machine would collide on this port
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29500", rank=rank, world_size=world_size)
    return rank, int(os.environ["LOCAL_RANK"]), world_size, torch.device("cpu")


def build_loader(dataset, batch_size):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
