"""Exercise 2.4: gradient accumulation with no_sync(): one all-reduce per accumulation window."""

from __future__ import annotations

import torch

from autograder.checks import Check, each_rank, matches_reference
from autograder.exercises import Exercise
from autograder.hints import Hint
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
        Check("one optimizer step per accumulation window", 2, _one_step_per_window, hint=Hint(
            idea="Accumulation takes one optimizer step per window of accum_steps micro-batches; when the "
                 "micro-batches do not fill the last window, the shorter rest is a window too, with its own step.",
            section="Gradient accumulation: `no_sync`",
            where="Where your loop steps the optimizer and zeroes the gradients, and how it recognizes the last "
                  "micro-batch of a window.",
            how="Step and zero the gradients only after a window's last micro-batch, and treat the micro-batches "
                "left over at the end as a last window of their own, so that there is one step per window.")),
        Check("gradients all-reduced once per window, on its last micro-batch (no_sync for the others)", 5,
              _communicates_once_per_window, hint=Hint(
                  idea="DDP all-reduces the gradients in every backward pass unless it runs inside no_sync, and it "
                       "decides during the forward pass whether the next backward synchronizes.",
                  section="Gradient accumulation: `no_sync`",
                  where="Which of your forward and backward passes run inside the model's no_sync context, micro-batch "
                        "by micro-batch within a window.",
                  how="Run both the forward and the backward of every micro-batch but a window's last inside no_sync, "
                      "and the last one's outside it, so that DDP averages the window's summed gradients once; leave "
                      "the all-reduce to DDP rather than calling one yourself.")),
        Check("equal to the single-process reference with the same windows", 3, _matches_reference, hint=Hint(
            idea="A window's step should use the mean gradient over its micro-batches and over the ranks, but "
                 "backward passes add their gradients up: left as a sum, a window of k micro-batches steps k times "
                 "too far; and gradients cleared inside a window, or never cleared after a step, step with too "
                 "little or too much.",
            section="Averaged, not summed: the global batch and the learning rate",
            where="How your loop scales each micro-batch's loss (or the gradients) before the step, in full windows "
                  "and in the short last one, and where it clears the gradients: once after each step, never "
                  "between the micro-batches of one window.",
            how="Divide by the number of micro-batches in the window each one belongs to, so that the accumulated "
                "gradient is their mean (the short last window holds fewer than accum_steps); the mean over the ranks "
                "is DDP's, with no sum of your own on top.")),
    ],
)
