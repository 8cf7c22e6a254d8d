"""TinyNet on two machines with the static rendezvous: each machine is given its number."""
import argparse
import gc
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset

NODE_COMMANDS = [
    "torchrun --nnodes=2 --nproc-per-node=2 --node-rank=0 --master-addr=$HEAD --master-port=$PORT train.py",
    "torchrun --nnodes=2 --nproc-per-node=2 --node-rank=1 --master-addr=$HEAD --master-port=$PORT train.py",
]


def setup():
    """(rank, world size, device) of this process: the group's once it is joined, else a job of one."""
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    backend, device = pick(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if "RANK" not in os.environ:
        return 0, 1, device
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size(), device


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    args = parser.parse_args()

    rank, world_size, device = setup()
    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler)
    model = make_model(seed=0).to(device)
    trained = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if world_size > 1 or \
        dist.is_initialized() else model
    optimizer = torch.optim.SGD(trained.parameters(), lr=args.lr, momentum=0.9)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(trained(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()

    if rank == 0:
        torch.save({k: v.cpu() for k, v in model.state_dict().items()}, args.out)
    if dist.is_initialized():
        del trained  # DDP sits in reference cycles: free it while the group exists, or gloo
        gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
