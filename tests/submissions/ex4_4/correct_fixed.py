"""Train TinyNet under torchrun and survive a killed worker: a snapshot every epoch, a resume on start."""
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


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--global-batch", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--out", default="weights.pt")
    parser.add_argument("--snapshot", default="snapshot.pt")
    return parser.parse_args()


def save_snapshot(path, model, optimizer, epoch):
    handle, partial = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".partial")
    with os.fdopen(handle, "wb") as out:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, out)
    os.replace(partial, path)


def resume(path, model, optimizer, device) -> int:
    """The epoch to start at: 0, or the one after the snapshot's."""
    if not os.path.exists(path):
        return 0
    snapshot = torch.load(path, map_location=device)
    model.load_state_dict(snapshot["model"])
    optimizer.load_state_dict(snapshot["optimizer"])
    return snapshot["epoch"] + 1


def main():
    args = parse_args()
    distributed = "RANK" in os.environ
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    backend, device = pick(local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
    if distributed:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    rank = dist.get_rank() if distributed else 0
    world_size = dist.get_world_size() if distributed else 1
    is_main = rank == 0

    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler)
    model = make_model(seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    start = resume(args.snapshot, model, optimizer, device)
    trained = DDP(model, device_ids=[device.index] if device.type == "cuda" else None) if distributed else model

    for epoch in range(start, args.epochs):
        for group in optimizer.param_groups:
            group["lr"] = args.lr * 0.5 ** epoch  # the learning rate halves every epoch
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(trained(x.to(device)), y.to(device)).backward()
            optimizer.step()
        if is_main:
            save_snapshot(args.snapshot, model, optimizer, epoch)
        if distributed:
            dist.barrier()

    if is_main:
        torch.save({name: t.cpu() for name, t in model.state_dict().items()}, args.out)
    if distributed:
        del trained  # DDP sits in reference cycles: free it while the group exists, or gloo
        gc.collect()  # (PyTorch 2.13) can abort the process at exit, after all the work
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
