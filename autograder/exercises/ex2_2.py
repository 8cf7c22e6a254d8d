"""Exercise 2.2: the training data loader over a DistributedSampler."""

from __future__ import annotations

from autograder.checks import Check, each_rank, shares_disjoint_and_covering
from autograder.exercises import Exercise
from ddpcourse.given.ex2_2 import BATCH, EPOCHS, N


def _disjoint_and_covering(runs):
    for world in runs:
        plain = [r for r in world.ranks if not r.result["distributed"]]
        for epoch in range(EPOCHS):
            shares = {r.rank: r.result["epochs"][epoch]["indices"] for r in world.ranks}
            message = shares_disjoint_and_covering(shares, N, world.world_size, f"{world.label}, epoch {epoch}")
            if message and plain:
                message += (f"; rank {plain[0].rank}'s loader draws from a {plain[0].result['sampler']}, "
                            "not a DistributedSampler, so it knows nothing of the other ranks")
            if message:
                return message


def _order_changes(runs):
    for world in runs:
        orders = [world.ranks[0].result["epochs"][e]["indices"] for e in range(EPOCHS)]
        if orders[0] == sorted(orders[0]):
            return f"{world.label}: rank 0 reads its share in index order: nothing is shuffled"
        if len({tuple(o) for o in orders}) < EPOCHS:
            return (f"{world.label}: rank 0 saw the same order in two epochs although set_epoch "
                    "was called: the shuffling does not depend on the epoch")


def _no_shuffle_beside_sampler(runs):
    for world, r in each_rank(runs):
        for loader in r.of("dataloader"):
            if loader.get("shuffle") and loader.get("sampler"):
                return (f"rank {r.rank}: DataLoader(shuffle=True, sampler=...) at {loader['caller']}; "
                        "the two are mutually exclusive (PyTorch raises ValueError)")


def _batch_size(runs):
    for world, r in each_rank(runs):
        sizes = r.result["epochs"][0]["batch_sizes"]
        if sizes and max(sizes) != BATCH:
            return f"{world.label}: rank {r.rank}'s batches hold {max(sizes)} samples, asked for {BATCH}"


EXERCISE = Exercise(
    id="2.2",
    title="data loader over a DistributedSampler",
    kind="function", on_cpu=True,
    entry="build_loader",
    params=lambda seed: {"seed": seed},
    work=lambda runs: None if any(isinstance(r.result, dict) and any(e.get("indices") for e in r.result.get("epochs", []))
                                  for w in runs for r in w.ranks) else "the loader gave no sample on any rank",
    checks=[
        Check("each epoch the ranks' samples are disjoint and cover the dataset", 2, _disjoint_and_covering,
              hint="DataLoader(dataset, batch_size=batch_size, sampler=DistributedSampler(dataset)): the sampler "
                   "takes the rank and the world size from the process group"),
        Check("the order changes every epoch once set_epoch is called (shuffle in the sampler)", 1, _order_changes,
              hint="keep DistributedSampler's shuffle=True (the default); the training loop calls set_epoch"),
        Check("no shuffle=True beside the sampler", 1, _no_shuffle_beside_sampler, needs="partial",
              hint="the sampler shuffles; leave DataLoader's shuffle at its default (False)"),
        Check("batches of batch_size samples on every rank", 1, _batch_size,
              hint="batch_size is per process: pass it to the DataLoader unchanged"),
    ],
)
