# A different shape: a flat script in the style of nanoGPT, with a master_process flag,
# a barrier before saving, and the checkpoint written with its state moved to the CPU.
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ddpcourse import make_model, toy_dataset

EPOCHS = 3
BATCH_SIZE = 8
LR = 0.1
CHECKPOINT = "checkpoint.pt"


def main():
    ddp_rank = int(os.environ.get("RANK", 0))
    ddp_local_rank = int(os.environ.get("LOCAL_RANK", 0))
    use_cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    device = f"cuda:{ddp_local_rank}" if use_cuda else "cpu"
    if use_cuda:
        torch.cuda.set_device(device)
    master_process = ddp_rank == 0

    data = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(data, shuffle=True)
    loader = DataLoader(data, BATCH_SIZE, sampler=sampler)
    raw_model = make_model(seed=0).to(device)
    model = DistributedDataParallel(raw_model, device_ids=[ddp_local_rank] if use_cuda else None)
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad(set_to_none=True)
            criterion(model(xb.to(device)), yb.to(device)).backward()
            opt.step()
        if master_process:
            print(f"epoch {epoch} done")

    dist.barrier()
    if master_process:
        torch.save({k: v.cpu() for k, v in raw_model.state_dict().items()}, CHECKPOINT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
