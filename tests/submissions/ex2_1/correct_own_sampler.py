# A sampler of its own: a permutation seeded by the epoch, dealt out rank by rank, read by worker processes
# (they share batches through /dev/shm, as a real training script's do).
import os

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler


def setup():
    local_rank = int(os.environ["LOCAL_RANK"])
    on_gpus = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    device = torch.device("cuda", local_rank) if on_gpus else torch.device("cpu")
    if on_gpus:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if on_gpus else "gloo")
    return dist.get_rank(), local_rank, dist.get_world_size(), device


class EpochShards(Sampler):
    def __init__(self, n):
        self.n, self.epoch = n, 0
        self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.n, generator=torch.Generator().manual_seed(1234 + self.epoch)).tolist()
        return iter(order[self.rank::self.world])

    def __len__(self):
        return len(range(self.rank, self.n, self.world))


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=EpochShards(len(dataset)), num_workers=2)
