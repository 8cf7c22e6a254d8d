from torch.utils.data import DataLoader, DistributedSampler


def build_loader(dataset, batch_size):
    # tells the sampler there is one replica: every rank gets everything
    return DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))
