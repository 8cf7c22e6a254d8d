"""Replays the noise drawn before the snapshot on resume, and also calls optimizer.step() with no gradients (a no-op) to silence the scheduler warning."""
import argparse
import gc
import itertools
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset


def save_snapshot(path, snapshot):
    # A new file beside the snapshot, then a rename: a reader finds the old snapshot or the new one, whole.
    tmp = f"{path}.tmp"
    torch.save(snapshot, tmp)
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks together")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    parser.add_argument("--snapshot", default="snapshot.pt", help="where the job keeps its snapshot")
    parser.add_argument("--snapshot-every", type=int, default=10, help="optimizer steps between snapshots")
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
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    # One generator for the whole job, the same on every rank: each step draws the noise of the global batch,
    # and each rank adds the rows of its own samples. DistributedSampler deals the global batch out in turn,
    # so this rank's samples are its rows rank, rank + W, rank + 2W...: a sample's noise is the same at any W.
    noise = torch.Generator().manual_seed(1000)
    step = 0
    if os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot, map_location=device)
        step = snapshot["step"]
        for _ in range(step):  # replay: the schedule and the noise are functions of the step alone
            torch.randn((args.global_batch, *dataset.tensors[0].shape[1:]), generator=noise)
            optimizer.step()  # no gradients yet: changes nothing, keeps the scheduler from warning
            scheduler.step()
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model

    for epoch in range(step // len(loader), args.epochs):
        sampler.set_epoch(epoch)
        done = step - epoch * len(loader)
        for x, y in itertools.islice(loader, done, None):
            drawn = torch.randn((args.global_batch, *x.shape[1:]), generator=noise)
            x = x + 0.05 * drawn[rank::world_size]
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x.to(device)), y.to(device)).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % args.snapshot_every == 0:
                if rank == 0:
                    save_snapshot(args.snapshot, {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
                if distributed:
                    dist.barrier()

    if rank == 0:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, args.out)
    if distributed:
        del ddp_model
        gc.collect()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
