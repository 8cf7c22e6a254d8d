"""Train TinyNet on the toy data as one process or as one rank of a torchrun job."""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, pick, toy_dataset


def dist_info():
    """(distributed, rank, local rank, world size): (False, 0, 0, 1) outside torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1 and "RANK" not in os.environ:
        return False, 0, 0, 1
    return True, int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"])


parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--global-batch", type=int, default=16)
parser.add_argument("--lr", type=float, default=0.1)
parser.add_argument("--out", default="weights.pt")
args = parser.parse_args()

ddp, rank, local_rank, world_size = dist_info()
master = rank == 0
if ddp:
    backend, device = pick(local_rank, int(os.environ["LOCAL_WORLD_SIZE"]))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
else:
    device = torch.device("cpu")

data = toy_dataset(n=96, seed=0)
sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0)
batches = DataLoader(data, batch_size=args.global_batch // world_size, sampler=sampler)
net = make_model(seed=0).to(device)
opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
model = DDP(net) if ddp and device.type == "cpu" else DDP(net, device_ids=[local_rank]) if ddp else net

for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    for x, y in batches:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()

if master:
    torch.save(net.state_dict(), args.out)
if ddp:
    del model
    dist.destroy_process_group()
