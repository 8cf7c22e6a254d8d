"""Train TinyNet with DDP: starts its own processes with mp.spawn, as before torchrun."""
import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, toy_dataset

WORLD_SIZE = 2


def worker(rank, args):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE)
    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, num_replicas=WORLD_SIZE, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.global_batch // WORLD_SIZE, sampler=sampler)
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ddp_model = DDP(model)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x), y).backward()
            optimizer.step()
    if rank == 0:
        torch.save(model.state_dict(), args.out)
    del ddp_model  # DDP sits in reference cycles: free it while the group exists, or gloo
    gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    mp.spawn(worker, args=(parser.parse_args(),), nprocs=WORLD_SIZE)
