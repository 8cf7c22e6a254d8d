"""A small trainer in the style of PyTorch's multinode tutorial, at step granularity: the schedule is a StepLR
stepped every epoch, and the snapshot holds MODEL_STATE, OPTIMIZER_STATE, SCHEDULER_STATE and STEPS_RUN."""
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
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)
        self.steps_run = 0
        self.snapshot = Path(args.snapshot)
        if self.snapshot.exists():
            self._load_snapshot()
        self.ddp = DDP(self.model) if self.distributed else self.model

    def _load_snapshot(self):
        state = torch.load(self.snapshot, map_location="cpu")
        self.model.load_state_dict(state["MODEL_STATE"])
        self.optimizer.load_state_dict(state["OPTIMIZER_STATE"])
        self.scheduler.load_state_dict(state["SCHEDULER_STATE"])
        self.steps_run = state["STEPS_RUN"]

    def _save_snapshot(self):
        if self.rank == 0:
            tmp = self.snapshot.with_name(self.snapshot.name + ".partial")
            torch.save({"MODEL_STATE": self.model.state_dict(), "OPTIMIZER_STATE": self.optimizer.state_dict(),
                        "SCHEDULER_STATE": self.scheduler.state_dict(), "STEPS_RUN": self.steps_run}, tmp)
            os.replace(tmp, self.snapshot)
        if self.distributed:
            dist.barrier()

    def train(self):
        per_epoch = len(self.loader)
        for epoch in range(self.steps_run // per_epoch, self.args.epochs):
            self.sampler.set_epoch(epoch)
            for i, (x, y) in enumerate(self.loader):
                if epoch * per_epoch + i < self.steps_run:
                    continue  # trained before the snapshot
                self.optimizer.zero_grad()
                F.cross_entropy(self.ddp(x), y).backward()
                self.optimizer.step()
                self.steps_run += 1
                if self.steps_run % per_epoch == 0:
                    self.scheduler.step()  # the epoch is over: half the learning rate from the next
                if self.steps_run % self.args.snapshot_every == 0:
                    self._save_snapshot()
        if self.rank == 0:
            torch.save(self.model.state_dict(), self.args.out)

    def close(self):
        if self.distributed:
            del self.ddp
            dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for flag, kind, default in (("--epochs", int, 2), ("--global-batch", int, 16), ("--lr", float, 0.1),
                                ("--out", str, "weights.pt"), ("--snapshot", str, "snapshot.pt"),
                                ("--snapshot-every", int, 10)):
        parser.add_argument(flag, type=kind, default=default)
    trainer = Trainer(parser.parse_args())
    trainer.train()
    trainer.close()
