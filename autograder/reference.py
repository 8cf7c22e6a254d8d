"""The trusted single-process runs that the checks compare with.

Each reference trains one plain model on exactly the global batches the ranks see
together and averages the ranks' losses as DDP averages their gradients, so a correct
distributed run matches it up to float rounding at every world size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DistributedSampler, TensorDataset

from ddpcourse import make_model


class SGD:
    """Plain SGD, the update torch.optim.SGD makes with its defaults.

    torch.optim imports torch._dynamo on first use (seconds); the grader needs none of it.
    """

    def __init__(self, params, lr: float):
        self.params, self.lr = list(params), lr

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.add_(p.grad, alpha=-self.lr)


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().double().flatten() for p in model.parameters()])


def sampler_shares(dataset, world_size: int, epoch: int, seed: int = 0) -> list[list[int]]:
    """The indices each rank's DistributedSampler yields in `epoch` (shuffled, padded)."""
    shares = []
    for rank in range(world_size):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        shares.append(list(sampler))
    return shares


def ddp_training(dataset: TensorDataset, world_size: int, epochs: int, batch_size: int, lr: float,
                 model_seed: int = 0) -> torch.Tensor:
    """Final parameters of a DDP run with DistributedSampler + set_epoch, trained with SGD."""
    shares = [sampler_shares(dataset, world_size, epoch) for epoch in range(epochs)]
    return training_on_shares(dataset, shares, batch_size, lr, model_seed)


def training_on_shares(dataset: TensorDataset, shares: list[list[list[int]]], batch_size: int, lr: float,
                       model_seed: int = 0) -> torch.Tensor:
    """Final parameters of SGD on the global batches of ``shares[epoch][rank]``, the indices each rank drew.

    Step k of an epoch uses every rank's k-th batch of ``batch_size``; the ranks' losses are averaged,
    as DDP averages their gradients.
    """
    model = make_model(model_seed)
    optimizer = SGD(model.parameters(), lr=lr)
    x, y = dataset.tensors
    for epoch in shares:
        for start in range(0, max(map(len, epoch)), batch_size):
            batches = [share[start:start + batch_size] for share in epoch]
            optimizer.zero_grad()
            loss = sum(F.cross_entropy(model(x[b]), y[b]) for b in batches if b) / len(epoch)
            loss.backward()
            optimizer.step()
    return flat(model)


def accumulated_training(model: torch.nn.Module, micro_batches: list[list[tuple]], accum_steps: int,
                         lr: float) -> torch.Tensor:
    """Gradient accumulation over windows of `accum_steps` micro-batches, averaged over ranks.

    micro_batches[rank][k] is rank's k-th (x, y); one SGD step per window. A short last window is a
    window too: its gradient is the mean over the micro-batches it holds.
    """
    optimizer = SGD(model.parameters(), lr=lr)
    world_size, steps = len(micro_batches), len(micro_batches[0])
    for start in range(0, steps, accum_steps):
        optimizer.zero_grad()
        loss = 0.0
        for share in micro_batches:
            window = share[start:start + accum_steps]
            for x, y in window:
                loss = loss + F.cross_entropy(model(x), y) / len(window)
        (loss / world_size).backward()
        optimizer.step()
    return flat(model)


@torch.no_grad()
def accuracy(model: torch.nn.Module, dataset: TensorDataset) -> float:
    x, y = dataset.tensors
    return (model(x).argmax(dim=1) == y).sum().item() / len(y)
