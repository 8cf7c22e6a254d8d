"""Exercise 2.4: gradient accumulation with no_sync(): one all-reduce per accumulation window."""

from __future__ import annotations

import torch

from autograder.checks import Check, each_rank, matches_reference
from autograder.exercises import Exercise
from autograder.reference import accumulated_training, flat
from ddpcourse import make_model
from ddpcourse.given.ex2_4 import ACCUM, LR, SIZES, STEPS, WINDOWS, micro_batches


def reference(seed: int, world_size: int, windows: list[list[dict]]) -> torch.Tensor:
    """Rank 0's parameters after training on the windows the ranks actually stepped on.

    Each window is judged as the student's loop formed it (its micro-batches, whether its gradients
    were combined across ranks), with the loss of each micro-batch divided by its window's size.
    Which windows and how they were synchronized are charged by their own checks, not here.
    """
    shares = [micro_batches(seed, world_size, r) for r in range(world_size)]
    return accumulated_training(lambda: make_model(seed), shares, windows, LR)


def windows(r) -> list[dict]:
    """The rank's accumulation windows as its loop formed them: the micro-batches between optimizer steps.

    Per window: the micro-batches' indices, whether each forward ran in sync mode (outside no_sync),
    how many times DDP all-reduced the gradients, and whether the code all-reduced them itself.
    """
    found, current, pending = [], {"micro": [], "synced": [], "reduces": 0, "by_hand": False}, None
    for e in r.events:
        kind = e.get("kind")
        if kind == "ddp_forward":
            pending = bool(e.get("sync"))
        elif kind == "micro_batch":
            current["micro"].append(e["index"])
            current["synced"].append(bool(pending))
            pending = None
        elif kind == "gradient_allreduce":
            current["reduces"] += 1
        elif kind == "collective" and e.get("op") == "all_reduce" and e.get("caller"):
            current["by_hand"] = True
        elif kind == "optimizer_step":
            found.append(current)
            current = {"micro": [], "synced": [], "reduces": 0, "by_hand": False}
    return found


def _one_step_per_window(runs):
    for world, r in each_rank(runs):
        steps = len(r.of("optimizer_step"))
        if steps != WINDOWS:
            return (f"{world.label}: rank {r.rank} stepped the optimizer {steps} times for "
                    f"{STEPS} micro-batches in windows of {ACCUM}; expected {WINDOWS} (windows of "
                    f"{', '.join(map(str, SIZES))}: the short last window is a window too)")


def _communicates_once_per_window(runs):
    for world in runs:
        if world.world_size == 1:
            continue
        for r in world.ranks:
            for n, window in enumerate(windows(r), 1):
                size = len(window["micro"])
                expected = [k == size - 1 for k in range(size)]
                if window["synced"] != expected or window["reduces"] != 1:
                    pattern = "".join("S" if s else "n" for s in window["synced"])
                    return (f"{world.label}: rank {r.rank}, window {n} of {size} micro-batch(es): "
                            f"DDP all-reduced the gradients {window['reduces']} time(s), expected once; forward "
                            f"passes synced/no_sync: {pattern or 'none'} (expected "
                            f"{''.join('S' if s else 'n' for s in expected)})"
                            + ("; the code all-reduced gradients itself instead" if window["by_hand"] else ""))


def _matches_reference(runs):
    return matches_reference(
        runs, lambda w: reference(runs.params["seed"], w.world_size, [windows(r) for r in w.ranks]),
        "the reference on the same windows")


EXERCISE = Exercise(
    id="2.4",
    title="gradient accumulation with no_sync",
    kind="function",
    entry="train_accumulate",
    warm_imports=("torch._dynamo",),
    params=lambda seed: {"seed": seed},
    expected=lambda seed: {"initial": flat(make_model(seed))},
    work=lambda runs: None if any(r.of("optimizer_step") for w in runs for r in w.ranks) else
    "no rank took a single optimizer step",
    checks=[
        Check("one optimizer step per accumulation window", 2, _one_step_per_window,
              hint="optimizer.step() and zero_grad() after the last micro-batch of each window only, "
                   "the short last window included"),
        Check("gradients all-reduced once per window, on its last micro-batch (no_sync for the others)", 5,
              _communicates_once_per_window,
              hint="with model.no_sync(): forward and backward for all but the window's last micro-batch, whose "
                   "backward outside no_sync lets DDP average the window's gradients across ranks"),
        Check("equal to the single-process reference with the same windows", 3, _matches_reference,
              hint="divide each micro-batch's loss by the number of micro-batches in its window (accum_steps, "
                   "or fewer in a short last window) so that every window's gradient is a mean"),
    ],
)
