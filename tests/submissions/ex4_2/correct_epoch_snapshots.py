"""Train TinyNet under torchrun, surviving restarts: a snapshot at the end of every epoch, a resume at the start."""
import argparse
import gc
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset


def save_snapshot(path, model, optimizer, epoch):
    # A new file beside the snapshot, then a rename: a reader finds the old snapshot or the new one, whole.
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp)
    os.replace(tmp.name, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks together")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    parser.add_argument("--snapshot", default="snapshot.pt")
    args = parser.parse_args()

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
    first_epoch = 0
    if os.path.exists(args.snapshot):  # a restarted job: every rank loads the same, whole snapshot
        snapshot = torch.load(args.snapshot, map_location=device)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        first_epoch = snapshot["epoch"] + 1
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model

    for epoch in range(first_epoch, args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x.to(device)), y.to(device)).backward()
            optimizer.step()
        if rank == 0:
            save_snapshot(args.snapshot, model, optimizer, epoch)
        if distributed:
            dist.barrier()  # the snapshot of this epoch is whole before any rank goes on

    if rank == 0:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, args.out)
    if distributed:
        del ddp_model  # DDP sits in reference cycles: free it while the group exists, or gloo
        gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
