"""A small trainer in the style of PyTorch's multinode tutorial: snapshots hold MODEL_STATE, OPTIMIZER_STATE, EPOCHS_RUN."""
import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, toy_dataset


class Trainer:
    def __init__(self, args):
        self.args = args
        self.distributed = "RANK" in os.environ
        self.rank = int(os.environ.get("RANK", 0))
        self.world_size = int(os.environ.get("WORLD_SIZE", 1))
        if self.distributed:
            dist.init_process_group("gloo")
        self.data = toy_dataset(n=96, seed=0)
        self.sampler = DistributedSampler(self.data, num_replicas=self.world_size, rank=self.rank, seed=0)
        self.loader = DataLoader(self.data, batch_size=args.global_batch // self.world_size, sampler=self.sampler)
        self.model = make_model(seed=0)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=args.lr, momentum=0.9)
        self.epochs_run = 0
        self.snapshot = Path(args.snapshot)
        if self.snapshot.exists():
            self._load_snapshot()
        self.ddp = DDP(self.model) if self.distributed else self.model

    def _load_snapshot(self):
        state = torch.load(self.snapshot, map_location="cpu")
        self.model.load_state_dict(state["MODEL_STATE"])
        self.optimizer.load_state_dict(state["OPTIMIZER_STATE"])
        self.epochs_run = state["EPOCHS_RUN"]

    def _save_snapshot(self, epochs_run):
        tmp = self.snapshot.with_name(self.snapshot.name + ".partial")
        torch.save({"MODEL_STATE": self.model.state_dict(), "OPTIMIZER_STATE": self.optimizer.state_dict(),
                    "EPOCHS_RUN": epochs_run}, tmp)
        os.replace(tmp, self.snapshot)

    def train(self):
        for epoch in range(self.epochs_run, self.args.epochs):
            self.sampler.set_epoch(epoch)
            for x, y in self.loader:
                self.optimizer.zero_grad()
                F.cross_entropy(self.ddp(x), y).backward()
                self.optimizer.step()
            if self.rank == 0:
                self._save_snapshot(epoch + 1)
            if self.distributed:
                dist.barrier()
        if self.rank == 0:
            torch.save(self.model.state_dict(), self.args.out)

    def close(self):
        if self.distributed:
            del self.ddp
            dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag, kind, default in (("--epochs", int, 2), ("--global-batch", int, 16), ("--lr", float, 0.1),
                                ("--out", str, "weights.pt"), ("--snapshot", str, "snapshot.pt")):
        parser.add_argument(flag, type=kind, default=default)
    trainer = Trainer(parser.parse_args())
    trainer.train()
    trainer.close()
