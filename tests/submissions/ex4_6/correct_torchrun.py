"""Train TinyNet on two Slurm nodes, and survive a preemption: a snapshot on SIGTERM, a resume after the requeue."""
import argparse
import gc
import os
import signal
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpcourse import make_model, toy_dataset

BATCH_SCRIPT = r"""#!/bin/bash
#SBATCH --job-name=tinynet
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
port=$((20000 + SLURM_JOB_ID % 20000))
export OMP_NUM_THREADS=1
srun torchrun --nnodes="$SLURM_NNODES" --nproc-per-node=2 \
    --rdzv-backend=c10d --rdzv-endpoint="$head:$port" --rdzv-id="$SLURM_JOB_ID" \
    train.py --snapshot="$PWD/snapshot.pt"
"""

preempted = False


def on_sigterm(signum, frame):
    global preempted
    preempted = True  # acted on at the end of the step, by every rank at once


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
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--step-seconds", type=float, default=0.2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)

    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    x, y = toy_dataset(n=96, seed=0).tensors
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    step = 0
    if os.path.exists(args.snapshot):
        snapshot = torch.load(args.snapshot)
        model.load_state_dict(snapshot["model"])
        optimizer.load_state_dict(snapshot["optimizer"])
        step = snapshot["step"]
    ddp_model = DDP(model)
    share = args.global_batch // world_size

    while step < args.steps:
        epoch, start = divmod(step * args.global_batch, len(x))
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        mine = order[start + rank * share: start + (rank + 1) * share]
        optimizer.zero_grad()
        F.cross_entropy(ddp_model(x[mine]), y[mine]).backward()
        optimizer.step()
        step += 1
        stop_now = torch.tensor([float(preempted)])
        dist.all_reduce(stop_now, op=dist.ReduceOp.MAX)  # 1 if any rank got the signal
        if rank == 0 and (step % args.every == 0 or stop_now.item() > 0 or step == args.steps):
            save_snapshot(args.snapshot, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                          "step": step})
        if stop_now.item() > 0:
            break
        time.sleep(args.step_seconds)

    del ddp_model
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
