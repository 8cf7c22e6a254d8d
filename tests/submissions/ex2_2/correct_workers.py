# Loads with worker processes, as a real training script does: they share batches through /dev/shm.
from torch.utils.data import DataLoader, DistributedSampler


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset), num_workers=2)
