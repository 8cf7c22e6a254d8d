"""Train TinyNet on the toy data: `python train.py` or under torchrun. A killed worker loses the whole run."""
import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks together")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    parser.add_argument("--snapshot", default="snapshot.pt", help="where the job keeps its snapshot")
    parser.add_argument("--snapshot-every", type=int, default=10, help="optimizer steps between snapshots")
    args = parser.parse_args()

    # Under torchrun these are set, and this process is one rank of a job; without, it is a job of one.
    distributed = "RANK" in os.environ
    rank = int(os.environ.get("RANK", 0))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    backend, device = pick(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if distributed:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)

    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler)
    model = make_model(seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    # The learning rate falls along a cosine over the whole run, one scheduler step per optimizer step.
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    noise = torch.Generator().manual_seed(1000 + rank)  # each rank's own random noise on its inputs
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x = x + 0.05 * torch.randn(x.shape, generator=noise)
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x.to(device)), y.to(device)).backward()
            optimizer.step()
            scheduler.step()

    if rank == 0:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, args.out)
    if distributed:
        del ddp_model  # DDP sits in reference cycles: free it while the group exists, or gloo
        gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
