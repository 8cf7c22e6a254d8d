"""TinyNet on two Slurm nodes: torchrun started as `python -m torch.distributed.run`, the rendezvous at the
first node's address as Slurm knows it, and the preemption caught with a threading.Event."""
import argparse
import gc
import os
import signal
import threading
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from ddpcourse import make_model, toy_dataset

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=tinynet
#SBATCH --nodes=2
#SBATCH --ntasks=2
#SBATCH --ntasks-per-node=1
#SBATCH --requeue
#SBATCH --open-mode=append
first=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
addr=$(scontrol show node "$first" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')
port=$((29000 + SLURM_JOB_ID % 1000))
export OMP_NUM_THREADS=1
echo "restart ${SLURM_RESTART_COUNT:-0}: meeting at $addr:$port"
srun --kill-on-bad-exit=1 python -m torch.distributed.run \\
    --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint="$addr:$port" --rdzv-id="$SLURM_JOB_ID" \\
    train.py --snapshot=state/snapshot.pt
"""

stop_asked = threading.Event()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--snapshot", default="snapshot.pt")
    parser.add_argument("--step-seconds", type=float, default=0.2)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: stop_asked.set())

    dist.init_process_group(backend="gloo")
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    x, y = toy_dataset(n=96, seed=0).tensors
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    done = 0
    if os.path.isfile(args.snapshot):
        state = torch.load(args.snapshot, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        done = int(state["step"])
    net = DDP(model)
    per_rank = args.global_batch // world

    def snapshot():
        os.makedirs(os.path.dirname(args.snapshot) or ".", exist_ok=True)
        part = args.snapshot + ".part"
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done}, part)
        with open(part, "rb") as f:
            os.fsync(f.fileno())
        os.rename(part, args.snapshot)

    while done < args.steps:
        epoch, offset = divmod(done * args.global_batch, len(x))
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(epoch))
        idx = order[offset + rank * per_rank: offset + (rank + 1) * per_rank]
        optimizer.zero_grad()
        F.cross_entropy(net(x[idx]), y[idx]).backward()
        optimizer.step()
        done += 1
        flag = torch.tensor([1.0 if stop_asked.is_set() else 0.0])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        leaving = bool(flag.item())
        if rank == 0 and (leaving or done % args.every == 0 or done == args.steps):
            snapshot()
        if leaving:
            break
        time.sleep(args.step_seconds)

    del net
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
