"""Train TinyNet under torchrun and survive a worker killed at any step: a snapshot every --snapshot-every steps."""
import argparse
import gc
import itertools
import os
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset


def save_snapshot(path, snapshot):
    # A new file beside the snapshot, then a rename: a reader finds the old snapshot or the new one, whole.
    directory = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:
        torch.save(snapshot, tmp)
    os.replace(tmp.name, path)


def every_ranks(state, distributed, world_size):
    """Every rank's generator state, in rank order (a collective: every rank calls it)."""
    if not distributed:
        return [state]
    states = [None] * world_size
    dist.all_gather_object(states, state)
    return states


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
    noise = torch.Generator().manual_seed(1000 + rank)
    step = 0  # optimizer steps taken, across epochs
    if os.path.exists(args.snapshot):  # a restarted job: every rank loads the same, whole snapshot
        snapshot = torch.load(args.snapshot, map_location=device)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        scheduler.load_state_dict(snapshot["scheduler"])
        noise.set_state(snapshot["noise"][rank].cpu())
        step = snapshot["step"]
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model

    for epoch in range(step // len(loader), args.epochs):
        sampler.set_epoch(epoch)
        done = step - epoch * len(loader)  # batches of this epoch the snapshot had already trained
        for x, y in itertools.islice(loader, done, None):
            x = x + 0.05 * torch.randn(x.shape, generator=noise)
            optimizer.zero_grad()
            F.cross_entropy(ddp_model(x.to(device)), y.to(device)).backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % args.snapshot_every == 0:
                states = every_ranks(noise.get_state(), distributed, world_size)
                if rank == 0:
                    save_snapshot(args.snapshot, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                                  "scheduler": scheduler.state_dict(), "noise": states, "step": step})
                if distributed:
                    dist.barrier()  # the snapshot is whole before any rank goes on

    if rank == 0:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, args.out)
    if distributed:
        del ddp_model  # DDP sits in reference cycles: free it while the group exists, or gloo
        gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
