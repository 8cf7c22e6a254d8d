# No DDP: gradients synchronised by hand, summed but never divided by the world size.

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler

from ddpcourse import make_model, toy_dataset

EPOCHS = 3
BATCH_SIZE = 8
LR = 0.1
CHECKPOINT = "checkpoint.pt"


def main():
    dist.init_process_group("gloo")
    dataset = toy_dataset(n=96, seed=0)
    sampler = DistributedSampler(dataset)
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    model = make_model(seed=0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            for p in model.parameters():
                dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            optimizer.step()
    if dist.get_rank() == 0:
        torch.save(model.state_dict(), CHECKPOINT)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
