import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, toy_dataset

EPOCHS = 3
BATCH_SIZE = 8  # per process
LR = 0.1
CHECKPOINT = "checkpoint.pt"


def setup():
    """Join the job; return this process's rank and its device."""
    local_rank = int(os.environ["LOCAL_RANK"])
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return local_rank, device


def main():
    rank, device = setup()
    is_main = rank == 0
    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    model = make_model(seed=0).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)

    for epoch in range(EPOCHS):
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            for p in model.parameters():  # make sure every process has the same gradients
                dist.all_reduce(p.grad)
            optimizer.step()
        if is_main:
            print(f"epoch {epoch}: loss {loss.item():.3f}")

    if is_main:
        torch.save(model.state_dict(), CHECKPOINT)


if __name__ == "__main__":
    main()
