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


def main():
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    use_gpu = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if use_gpu else torch.device("cpu")
    if use_gpu:
        torch.cuda.set_device(device)
    dist.init_process_group(backend="nccl" if use_gpu else "gloo")
    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, shuffle=True)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    model = DDP(make_model(seed=0).to(device), device_ids=[local_rank] if use_gpu else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.module.state_dict(), CHECKPOINT)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
