"""Exercise 2.5: gradient accumulation with no_sync(): one all-reduce per accumulation window."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from autograder.checks import Check, each_rank, matches_reference, params_identical_across_ranks
from autograder.exercises import Exercise
from autograder.reference import accumulated_training, flat
from autograder.rig import device_for, join_group
from ddpcourse import make_model, toy_dataset

# 7 micro-batches of 4 per rank in windows of 3: windows of 3, 3 and 1, so three optimizer steps.
# The short last window is where a loop that only steps on full windows, or that always divides by
# accum_steps, goes wrong.
MICRO, STEPS, ACCUM, LR = 4, 7, 3, 0.1
SIZES = [min(ACCUM, STEPS - start) for start in range(0, STEPS, ACCUM)]
WINDOWS = len(SIZES)


def micro_batches(seed: int, world_size: int, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    x, y = toy_dataset(n=MICRO * STEPS * world_size, seed=seed).tensors
    mine = torch.arange(rank, len(x), world_size)
    return [(x[chunk], y[chunk]) for chunk in mine.split(MICRO)]


def reference(seed: int, world_size: int) -> torch.Tensor:
    shares = [micro_batches(seed, world_size, r) for r in range(world_size)]
    return accumulated_training(make_model(seed), shares, ACCUM, LR)


def harness(student, rank, layout, rec, seed, **_):
    device = device_for(layout, rank)  # before the group: nccl binds to the current device
    join_group()
    model = DDP(make_model(seed).to(device), device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    batches = [(x.to(device), y.to(device)) for x, y in micro_batches(seed, layout.world_size, rank)]
    student.train_accumulate(model, optimizer, batches, ACCUM)
    dist.destroy_process_group()


def _one_step_per_window(runs):
    for world, r in each_rank(runs):
        steps = len(r.of("optimizer_step"))
        if steps != WINDOWS:
            return (f"world size {world.world_size}: rank {r.rank} stepped the optimizer {steps} times for "
                    f"{STEPS} micro-batches in windows of {ACCUM}; expected {WINDOWS} (windows of "
                    f"{', '.join(map(str, SIZES))}: the short last window is a window too)")


def _communicates_once_per_window(runs):
    expected = [k == size - 1 for size in SIZES for k in range(size)]
    for world in runs:
        if world.world_size == 1:
            continue
        for r in world.ranks:
            synced = [e["sync"] for e in r.of("ddp_forward")]
            reduces = len(r.of("gradient_allreduce"))
            if synced != expected or reduces != WINDOWS:
                pattern = "".join("S" if s else "n" for s in synced)
                return (f"world size {world.world_size}: rank {r.rank} all-reduced gradients {reduces} time(s) "
                        f"for {WINDOWS} windows; forward passes synced/no_sync: {pattern or 'none'} "
                        f"(expected {''.join('S' if s else 'n' for s in expected)})")


EXERCISE = Exercise(
    id="2.5",
    title="gradient accumulation with no_sync",
    kind="function",
    entry="train_accumulate",
    harness=harness,
    warm_imports=("torch._dynamo",),
    params=lambda seed: {"seed": seed},
    expected=lambda seed: {"initial": flat(make_model(seed))},
    work=lambda runs: None if any(r.of("optimizer_step") for w in runs for r in w.ranks) else
    "no rank took a single optimizer step",
    checks=[
        Check("one optimizer step per accumulation window", 2, _one_step_per_window,
              hint="optimizer.step() and zero_grad() after the last micro-batch of each window only, "
                   "the short last window included"),
        Check("gradients all-reduced once per window, on its last micro-batch (no_sync for the others)", 3,
              _communicates_once_per_window,
              hint="with model.no_sync(): forward and backward for all but the window's last micro-batch"),
        Check("parameters identical on all ranks after every optimizer step", 2, params_identical_across_ranks,
              hint="the window's last backward must run outside no_sync so that DDP averages the gradients"),
        Check("equal to the single-process reference with the same windows", 3,
              lambda runs: matches_reference(runs, lambda w: reference(runs.params["seed"], w.world_size),
                                             "the reference"),
              hint="divide each micro-batch's loss by the number of micro-batches in its window (accum_steps, "
                   "or fewer in a short last window) so that every window's gradient is a mean"),
    ],
)
