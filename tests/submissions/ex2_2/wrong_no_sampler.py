from torch.utils.data import DataLoader


def build_loader(dataset, batch_size):
    # every rank reads the whole dataset
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)
