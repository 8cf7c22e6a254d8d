"""Train TinyNet on the toy data with DDP. It runs only under torchrun, with the settings below."""
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset

EPOCHS, GLOBAL_BATCH, LR, OUT = 2, 16, 0.1, "weights.pt"


def main():
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    backend, device = pick(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)

    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=GLOBAL_BATCH // world_size, sampler=sampler)
    model = make_model(seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x.to(device)), y.to(device)).backward()
            optimizer.step()

    if rank == 0:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, OUT)
    del ddp_model  # DDP sits in reference cycles: free it while the group exists, or gloo
    gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
