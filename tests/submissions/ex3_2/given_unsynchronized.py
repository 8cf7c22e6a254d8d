import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_bn_model, toy_dataset

EPOCHS = 2
BATCH_SIZE = 4  # per process
LR = 0.1
CHECKPOINT = "bn_checkpoint.pt"


def main():
    """Train BNNet with DDP on the toy dataset; global rank 0 saves the checkpoint."""
    local_rank = int(os.environ["LOCAL_RANK"])
    on_gpus = torch.cuda.is_available()
    if on_gpus:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if on_gpus else torch.device("cpu")
    dist.init_process_group("nccl" if on_gpus else "gloo")

    dataset = toy_dataset(n=96, seed=0)
    model = make_bn_model(seed=0).to(device)
    model = DDP(model, device_ids=[local_rank] if on_gpus else None)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

    if dist.get_rank() == 0:
        torch.save(model.module.state_dict(), CHECKPOINT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
