import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def build_loader(dataset, batch_size):
    # replicas and rank spelled out, a seed and drop_last=False stated
    sampler = DistributedSampler(dataset, num_replicas=dist.get_world_size(), rank=dist.get_rank(),
                                 shuffle=True, seed=0, drop_last=False)
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, shuffle=False, num_workers=0)
