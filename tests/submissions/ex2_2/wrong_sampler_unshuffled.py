from torch.utils.data import DataLoader, DistributedSampler


def build_loader(dataset, batch_size):
    # shuffle=False in the sampler: the same fixed order every epoch
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, shuffle=False))
