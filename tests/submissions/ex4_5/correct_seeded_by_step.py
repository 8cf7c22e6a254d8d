"""Elastic training: rank 0 reads the snapshot and sends it on; each step's noise is seeded by the step itself."""
import argparse
import gc
import io
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
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--snapshot-every", type=int, default=10)
    args = parser.parse_args()

    dist.init_process_group(pick(int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]))[0])
    rank, world = dist.get_rank(), dist.get_world_size()
    device = pick(int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]))[1]
    if device.type == "cuda":
        torch.cuda.set_device(device)
    x_all, y_all = toy_dataset(n=96, seed=0).tensors
    steps_per_epoch = len(x_all) // args.global_batch
    total = args.epochs * steps_per_epoch
    model = make_model(seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)

    held = [None]
    if rank == 0 and os.path.exists(args.snapshot):
        with open(args.snapshot, "rb") as f:
            held = [f.read()]
    dist.broadcast_object_list(held, src=0)  # the bytes of the snapshot, or None: every rank the same
    step = 0
    if held[0] is not None:
        snapshot = torch.load(io.BytesIO(held[0]), map_location=device)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        scheduler.load_state_dict(snapshot["scheduler"])
        step = snapshot["step"]
    ddp_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)

    share = args.global_batch // world
    while step < total:
        epoch, place = divmod(step, steps_per_epoch)
        sampler = DistributedSampler(range(len(x_all)), num_replicas=world, rank=rank, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        mine = list(sampler)[place * share:(place + 1) * share]
        drawn = torch.randn((args.global_batch, x_all.shape[1]), generator=torch.Generator().manual_seed(7 + step))
        x = x_all[mine] + 0.05 * drawn[rank::world]
        optimizer.zero_grad()
        F.cross_entropy(ddp_model(x.to(device)), y_all[mine].to(device)).backward()
        optimizer.step()
        scheduler.step()
        step += 1
        if step % args.snapshot_every == 0:
            if rank == 0:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict(), "step": step}, args.snapshot + ".new")
                os.replace(args.snapshot + ".new", args.snapshot)
            dist.barrier()

    if rank == 0:
        torch.save(model.state_dict(), args.out)
    del ddp_model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
