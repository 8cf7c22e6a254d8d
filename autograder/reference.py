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
from ddpcourse.optim import SGD


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


def nearest_samples(values, dataset: TensorDataset) -> tuple[list[int], float]:
    """The dataset's sample nearest each row of ``values`` (numbers a model was given, rows of the dataset's
    width), and how far the farthest row was from its sample: a row that is no sample is far from all."""
    features = dataset.tensors[0].double()
    rows = torch.as_tensor(values, dtype=torch.float64).reshape(-1, features.shape[1])
    distance, index = torch.cdist(rows, features).min(dim=1)
    return index.tolist(), distance.max().item()


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
    return flat(trained_on_shares(lambda: make_model(model_seed), dataset, shares, batch_size, lr))


def trained_on_shares(make, dataset: TensorDataset, shares: list[list[list[int]]], batch_size: int, lr: float,
                      together: bool = False, momentum: float = 0.0, schedule=None) -> torch.nn.Module:
    """The model ``make()`` trained as ``training_on_shares`` trains; with ``together``, each step's
    forward pass sees the whole global batch at once, as synchronized batch norm sees it; with
    ``schedule``, epoch k steps with the learning rate ``schedule(k)``."""
    model = make()
    optimizer = SGD(model.parameters(), lr=lr, momentum=momentum)
    x, y = dataset.tensors
    for number, epoch in enumerate(shares):
        if schedule is not None:
            optimizer.lr = schedule(number)
        for start in range(0, max(map(len, epoch)), batch_size):
            batches = [share[start:start + batch_size] for share in epoch]
            optimizer.zero_grad()
            if together:
                out = model(x[[i for b in batches for i in b]]).split([len(b) for b in batches])
                loss = sum(F.cross_entropy(o, y[b]) for o, b in zip(out, batches) if b) / len(epoch)
            else:
                loss = sum(F.cross_entropy(model(x[b]), y[b]) for b in batches if b) / len(epoch)
            loss.backward()
            optimizer.step()
    return model


def accumulated_training(make, micro_batches: list[list[tuple]], windows: list[list[dict]],
                         lr: float) -> torch.Tensor:
    """Rank 0's parameters after gradient accumulation over the ranks' own windows.

    micro_batches[rank][k] is rank's k-th (x, y); windows[rank] lists the rank's windows in order, each
    with its micro-batch indices ("micro") and how its gradients were combined. Every rank keeps a
    model of its own, built by ``make()``: a window whose last backward ran in sync mode, or whose
    gradients the code all-reduced itself, steps every model with the mean over ranks of their window
    gradients (a window's gradient being the mean over its micro-batches); any other window steps each
    model with its own.
    """
    models = [make() for _ in micro_batches]
    optimizers = [SGD(m.parameters(), lr=lr) for m in models]
    for step in zip(*windows):
        grads = []
        for model, share, window in zip(models, micro_batches, step):
            model.zero_grad(set_to_none=True)
            used = [share[k] for k in window["micro"] if 0 <= k < len(share)]
            loss = sum(F.cross_entropy(model(x), y) for x, y in used) / max(len(used), 1)
            grads.append(torch.autograd.grad(loss, list(model.parameters())) if used else None)
        combined = all(w["by_hand"] or (w["synced"] and w["synced"][-1]) for w in step)
        present = [g for g in grads if g is not None]
        if combined and present:
            mean = [sum(parts) / len(step) for parts in zip(*present)]
            grads = [mean] * len(step)
        for model, optimizer, g in zip(models, optimizers, grads):
            for p, gp in zip(model.parameters(), g or []):
                p.grad = gp.clone()
            optimizer.step()
    return flat(models[0])


@torch.no_grad()
def correct_predictions(model: torch.nn.Module, dataset: TensorDataset) -> list[int]:
    """1 where the model's prediction for the sample is right, else 0: an accuracy over any subset."""
    x, y = dataset.tensors
    return (model(x).argmax(dim=1) == y).int().tolist()


def parameter_blocks(model: torch.nn.Module) -> list[tuple[str, slice]]:
    """(name, where it lies in the flattened parameters) for each of the model's parameters."""
    blocks, start = [], 0
    for name, p in model.named_parameters():
        blocks.append((name, slice(start, start + p.numel())))
        start += p.numel()
    return blocks


def averaged_gradients(world, step: int, before: str, make, shard) -> tuple[list, list] | None:
    """One step of hand-made data parallelism, as the harness kept it (labels "gradients at step N" and
    ``before``, the weights each rank held): (the gradients each rank ended with, the local gradients its
    held weights give on ``shard(step, world_size, rank)``), or None when a rank kept nothing."""
    held = [r.kept(before) for r in world.ranks]
    got = [r.kept(f"gradients at step {step}") for r in world.ranks]
    if any(v is None for v in held + got):
        return None
    w = world.world_size
    return got, [gradients_at(make(), held[r], *shard(step, w, r)) for r in range(w)]


def off_the_mean(got: list, local: list, blocks, rtol: float = 1e-4, atol: float = 1e-6):
    """The first (rank, parameter name, its slice, the mean over the ranks) whose gradient is not that mean."""
    mean = sum(local) / len(local)
    for rank, values in enumerate(got):
        for name, part in blocks:
            if not torch.allclose(values[part], mean[part], rtol=rtol, atol=atol):
                return rank, name, part, mean
    return None


def gradients_at(model: torch.nn.Module, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The flattened gradient of the cross-entropy on (x, y) with ``model``'s parameters set to ``params``."""
    torch.nn.utils.vector_to_parameters(params.float(), model.parameters())
    loss = F.cross_entropy(model(x), y)
    return torch.cat([g.flatten() for g in torch.autograd.grad(loss, list(model.parameters()))]).double()
