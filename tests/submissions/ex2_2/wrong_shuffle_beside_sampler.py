from torch.utils.data import DataLoader, DistributedSampler


def build_loader(dataset, batch_size):
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset), shuffle=True)
