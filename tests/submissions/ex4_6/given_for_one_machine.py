"""Train TinyNet on a Slurm cluster: BATCH_SCRIPT is the sbatch script that starts this file, train.py."""
import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpcourse import make_model, toy_dataset

BATCH_SCRIPT = r"""#!/bin/bash
#SBATCH --job-name=tinynet
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
export OMP_NUM_THREADS=1
srun torchrun --nnodes=2 --nproc-per-node=2 \
    --rdzv-backend=c10d --rdzv-endpoint=localhost:29500 --rdzv-id=tinynet \
    train.py --snapshot="$PWD/snapshot.pt"
"""


def save_snapshot(path, state):
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="steps between snapshots")
    parser.add_argument("--global-batch", type=int, default=16, help="samples per step, all ranks together")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--step-seconds", type=float, default=0.2, help="a pause after each step")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x, y = toy_dataset(n=96, seed=0).tensors
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    ddp_model = DDP(model)
    share = args.global_batch // world_size

    while step < args.steps:
        # Step `step` trains on the next global batch of a fixed shuffle of its epoch; each rank on its share.
        epoch, start = divmod(step * args.global_batch, len(x))
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        mine = order[start + rank * share: start + (rank + 1) * share]
        optimizer.zero_grad()
        F.cross_entropy(ddp_model(x[mine]), y[mine]).backward()
        optimizer.step()
        step += 1
        if rank == 0 and (step % args.every == 0 or step == args.steps):
            save_snapshot(args.snapshot, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                          "step": step})
        time.sleep(args.step_seconds)

    del ddp_model  # DDP sits in reference cycles: free it while the group exists
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
