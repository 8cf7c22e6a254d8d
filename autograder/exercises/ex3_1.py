"""Exercise 3.1: synchronized batch norm from scratch, in training mode:
sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps).

Every rank holds a batch of its own size (one rank a single sample), so a mean of the ranks'
means, or of their variances, shows. The grader reads back from each rank's output the mean and
variance the rank normalized with (the output is an affine function of the input, channel by
channel), so the running statistics are judged against the statistics the rank used: a wrong
mean is charged once, by the output's check.
"""

from __future__ import annotations

import torch

from autograder.checks import Check
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex3_1 import EPS, MOMENTUM, C, L, inputs, layer, rows

TOL = dict(rtol=1e-4, atol=1e-5)
PARTS = ("output", "input's gradient", "running mean", "running variance")


def _kept(r, w: int) -> dict[str, torch.Tensor] | None:
    n = rows(w)[r.rank]
    parts = r.kept_parts("output, gradient, running statistics", ((n, C, L), (n, C, L), (C,), (C,)))
    return None if parts is None else dict(zip(PARTS, parts))


# How a rank may have computed the statistics it normalized with: (mean rule, variance rule).
# "global" is right; the others are kinds of mistake the grader can follow, so that the checks
# after the output's judge the rest of the work against what the rank did.
MEANS = ("global", "local", "mean of means")
VARIANCES = ("global", "global unbiased", "local", "mean of variances", "pooled")


def statistics(xs: list[torch.Tensor], rank: int, rule: tuple[str, str]):
    """The mean and variance rank `rank` normalizes with under `rule`; differentiable in every x."""
    values = [_channels(x) for x in xs]
    whole = torch.cat(values, 1)
    mean = {"global": lambda: whole.mean(1), "local": lambda: values[rank].mean(1),
            "mean of means": lambda: torch.stack([v.mean(1) for v in values]).mean(0)}[rule[0]]()
    var = {"global": lambda: whole.var(1, unbiased=False), "global unbiased": lambda: whole.var(1),
           "local": lambda: values[rank].var(1, unbiased=False),
           "mean of variances": lambda: torch.stack([v.var(1, unbiased=False) for v in values]).mean(0),
           "pooled": lambda: sum(v.var(1, unbiased=False) * v.shape[1] for v in values) / whole.shape[1]}[rule[1]]()
    return mean, var


def run_as(seed: int, w: int, rule: tuple[str, str]) -> dict[str, list[torch.Tensor]]:
    """Every rank's output and input gradient, in float64, when every rank follows `rule`: for the
    right rule, global batch norm."""
    parts = [inputs(seed, w, r) for r in range(w)]
    xs = [x.double().requires_grad_() for x, _ in parts]
    p = {k: v.double() for k, v in layer(seed).items()}
    shape = (1, C, 1)
    ys = []
    for r, x in enumerate(xs):
        mean, var = statistics(xs, r, rule)
        ys.append((x - mean.view(shape)) / torch.sqrt(var.view(shape) + EPS) * p["weight"].view(shape)
                  + p["bias"].view(shape))
    sum((y * g.double()).sum() for y, (_, g) in zip(ys, parts)).backward()
    return {"output": [y.detach() for y in ys], "input's gradient": [x.grad for x in xs]}


OTHER = ("other", "other")  # batch norm with a mean and a variance of no rule the grader knows


def rule_of(seed: int, w: int, rank: int, output: torch.Tensor) -> tuple[str, str] | None:
    """The rule whose statistics the rank's output was normalized with: a known one, OTHER for statistics of no known
    rule, or None if the output is no batch norm at all."""
    x, _ = inputs(seed, w, rank)
    p = layer(seed)
    used = used_statistics(x, output, p["weight"], p["bias"])
    if used is None:
        return None
    xs = [inputs(seed, w, r)[0].double() for r in range(w)]
    close = lambda a, b: torch.allclose(a, b, rtol=1e-3, atol=1e-4)  # noqa: E731
    for m in MEANS:
        for v in VARIANCES:
            mean, var = statistics(xs, rank, (m, v))
            if close(used[0], mean) and close(used[1], var):
                return m, v
    return OTHER


def _channels(x: torch.Tensor) -> torch.Tensor:
    """(N, C, L) -> (C, N * L): each channel's values in a row."""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def used_statistics(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor):
    """The mean and variance a batch norm output y = (x - mean) / sqrt(var + eps) * weight + bias
    was computed with, read back channel by channel by fitting y = a x + c; None if y is not affine in x."""
    xc, yc = _channels(x.double()), _channels(y.double())
    dx, dy = xc - xc.mean(1, keepdim=True), yc - yc.mean(1, keepdim=True)
    a = (dx * dy).sum(1) / (dx * dx).sum(1)
    c = yc.mean(1) - a * xc.mean(1)
    if not torch.allclose(a[:, None] * xc + c[:, None], yc, rtol=1e-4, atol=1e-4):
        return None
    return (bias.double() - c) / a, (weight.double() / a) ** 2 - EPS


def _output(runs):
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        want = run_as(seed, w, ("global", "global"))
        for r in world.ranks:
            state = r.result.get("output") if isinstance(r.result, dict) else None
            if state in ("missing", "shape"):
                return (f"world size {w}: rank {r.rank}'s sync_batch_norm returned "
                        + ("None" if state == "missing" else "a tensor of another shape") + ", not a tensor shaped like x")
            kept = _kept(r, w)
            if kept is None:
                return f"world size {w}: rank {r.rank}'s output was not recorded"
            if torch.allclose(kept["output"], want["output"][r.rank], **TOL):
                continue
            if not torch.isfinite(kept["output"]).all():
                return (f"world size {w}, batches of {rows(w)} rows: rank {r.rank}'s output holds NaN or infinite "
                        "values: a variance below zero, or a count of zero, under the square root; check the count "
                        "behind each statistic (a channel has rows times length values on each rank)")
            return (f"world size {w}, batches of {rows(w)} rows: rank {r.rank}'s output "
                    + _what_it_used(rule_of(seed, w, r.rank, kept["output"])))


_SAID = {
    "local": "is normalized with its own batch's statistics: they must be the job's, over every rank's batch",
    "mean of means": ("is normalized with the mean of the ranks' means; with batches of different sizes that is not "
                      "the mean of the whole batch: sum the values and the counts over the ranks, then divide"),
    "mean of variances": ("is normalized with the mean of the ranks' variances, which leaves out how far the ranks' "
                          "means lie apart: the whole batch's variance also counts each rank's mean's distance from "
                          "the global mean, weighted by its count"),
    "global unbiased": "is normalized with the unbiased variance; batch norm normalizes with the biased one (divide by n)",
}
_SAID["pooled"] = _SAID["mean of variances"].replace("the mean of the ranks' variances", "the ranks' variances, weighted by their counts")


def _what_it_used(rule: tuple[str, str] | None) -> str:
    if rule is None:
        return "is not batch norm with any mean and variance: not (x - mean) / sqrt(var + eps) * weight + bias, per channel"
    if rule == OTHER:
        return ("is batch norm, but with a mean and a variance that are not the whole batch's: each channel's "
                "statistics are over every value it has on every rank, rows times length")
    mean, var = rule
    if rule == ("global", "global"):
        return ("has the job's mean and variance, but is not (x - mean) / sqrt(var + eps) * weight + bias: eps is "
                "added to the variance, inside the square root")
    if mean != "global":
        return _SAID[mean]
    return _SAID.get(var, "used another variance than the variance of the whole batch")


def _running_statistics(runs):
    seed = runs.params["seed"]
    start = layer(seed)
    for world in runs:
        w = world.world_size
        for r in world.ranks:
            kept = _kept(r, w)
            if kept is None:
                return f"world size {w}: rank {r.rank}'s running statistics were not recorded"
            x, _ = inputs(seed, w, r.rank)
            used = used_statistics(x, kept["output"], start["weight"], start["bias"])
            if used is None:
                continue  # no statistics to follow: the output's check says what is wrong
            rule = rule_of(seed, w, r.rank, kept["output"])  # normalized with the unbiased variance: charged once
            if rule == OTHER:
                continue  # statistics of no known rule, so no count to follow them with: the output's check says so
            problem = _updated_with(kept, used, start, _counts(x, used, w), rule is not None and rule[1] == "global unbiased")
            if problem:
                return f"world size {w}: on rank {r.rank}, {problem}"


def _counts(x, used, w) -> int:
    """The values per channel behind the statistics the rank used: its own batch's when it normalized
    with them (no synchronization, charged by the output's check), else the whole job's."""
    local = _channels(x.double())
    if torch.allclose(used[0], local.mean(1), rtol=1e-3, atol=1e-4):
        return local.shape[1]
    return sum(rows(w)) * L


def _updated_with(kept, used, start, count, already_unbiased: bool) -> str | None:
    """Whether the running statistics follow the batch statistics the rank normalized with."""
    mean, var = used
    close = lambda a, b: torch.allclose(a.double(), b, rtol=1e-3, atol=1e-4)  # noqa: E731
    old_mean, old_var = start["running_mean"].double(), start["running_var"].double()
    if close(kept["running mean"], old_mean) and close(kept["running variance"], old_var):
        return "the running statistics were never updated: every rank updates its own, in place"
    if not close(kept["running mean"], (1 - MOMENTUM) * old_mean + MOMENTUM * mean):
        return "the running mean is not (1 - momentum) * old + momentum * the batch mean"
    unbiased = (1 - MOMENTUM) * old_var + MOMENTUM * var * count / (count - 1)
    if close(kept["running variance"], unbiased) or close(kept["running variance"], (1 - MOMENTUM) * old_var
                                                          + MOMENTUM * var) and already_unbiased:
        return None
    if close(kept["running variance"], (1 - MOMENTUM) * old_var + MOMENTUM * var):
        return (f"the running variance was updated with the biased variance; running statistics use the unbiased "
                f"one, times n / (n - 1), n = {count} values per channel over the whole job")
    return "the running variance is not (1 - momentum) * old + momentum * the batch's unbiased variance"


def _gradient(runs):
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        for r in world.ranks:
            if isinstance(r.result, dict) and r.result.get("output") == "no grad":
                return (f"world size {w}: rank {r.rank}'s output does not require grad: no gradient reaches x "
                        "(no detach, no torch.no_grad around the computation)")
            kept = _kept(r, w)
            if kept is None:
                return f"world size {w}: rank {r.rank}'s gradient was not recorded"
            # the gradient of the forward this rank computed, right or not: a wrong forward is charged once
            rule = rule_of(seed, w, r.rank, kept["output"]) or ("global", "global")
            if rule == OTHER:
                continue  # no known forward to take the gradient of: the output's check says what is wrong
            run = run_as(seed, w, rule)
            if rule == ("global", "global") and not torch.allclose(kept["output"], run["output"][r.rank], **TOL):
                continue  # the right statistics in another formula: the output's check says so
            whole = run["input's gradient"][r.rank]
            got = kept["input's gradient"]
            if torch.allclose(got, whole, **TOL):
                continue
            if torch.isnan(got).all():
                return f"world size {w}: rank {r.rank}'s input has no gradient"
            gap = (got - whole).abs().nan_to_num(float("inf")).max().item()
            return (f"world size {w}: rank {r.rank}'s gradient of x differs from global batch norm's by up to {gap:.3g}"
                    + (": the other ranks' losses depend on this rank's x through the shared mean and variance, so "
                       "the backward pass needs an all-reduce too, of the ranks' sums, not their mean "
                       "(dist.all_reduce alone is invisible to autograd)"
                       if w > 1 and rule[0] != "local" else ""))


def _one_collective(runs):
    """Counted in the collectives each rank issued during the forward pass: any kind, functional ones too."""
    for world in sorted(runs, key=lambda w: -w.world_size):
        if world.world_size == 1:
            continue
        for r in world.ranks:
            window = r.windows("call", "backward").get(None, [])
            issued = [e.get("op") for e in window if e.get("kind") == "collective"]
            sent = [m for m in r.messages(window) if m[0] == "send"]
            if len(issued) + len(sent) > 1:
                messages = f"{len(sent)} point-to-point message(s)" if sent else ""
                calls = (f"{len(issued)} collectives ({', '.join(map(str, issued[:4]))}"
                         f"{', ...' if len(issued) > 4 else ''})") if issued else ""
                return (f"{world.label}: rank {r.rank} exchanged {' and '.join(filter(None, (calls, messages)))} in "
                        "the forward pass; one collective on one tensor of every statistic, stacked, does it (each "
                        "exchange costs a round trip)")


def _work(runs):
    """Some rank of a launch of several normalized with statistics that are not its own batch's alone."""
    seed = runs.params["seed"]
    for world in runs:
        if world.world_size == 1:
            continue
        for r in world.ranks:
            kept = _kept(r, world.world_size)
            if kept is None or rule_of(seed, world.world_size, r.rank, kept["output"]) != ("local", "local"):
                return None
    return "every rank normalized with its own batch's statistics: the ranks never combined them"


EXERCISE = Exercise(
    id="3.1",
    title="synchronized batch norm from scratch",
    kind="function", on_cpu=True,
    entry="sync_batch_norm",
    params=lambda seed: {"seed": seed},
    work=_work,
    checks=[
        Check("the output equals batch norm over all the ranks' batches put together", 3, _output,
              hint=Hint(
                  idea="Every rank normalizes each channel with the mean and the biased variance of all the ranks' "
                       "values together; with batches of different sizes, averaging the ranks' own means or "
                       "variances gives other numbers.",
                  section="2. Synchronized batch norm",
                  where="The part of sync_batch_norm before the normalization: what each rank sends, and how you turn "
                        "what comes back into the mean and the variance.",
                  how="Exchange quantities that simply add up over the ranks (the sums, the sums of squares and the "
                      "counts; or each rank's count, mean and summed squared deviations, combined by their counts), "
                      "divide by the total count, and normalize with the biased variance, eps inside the square root.",
                  lines_of=("collective",))),
        Check("running statistics updated on every rank with the batch mean and unbiased variance", 2,
              _running_statistics,
              hint=Hint(
                  idea="Every rank updates its own running mean and variance in place, with the statistics it "
                       "normalized with; the running variance is the unbiased one, over the values of all the ranks.",
                  section="2. Synchronized batch norm",
                  where="The end of sync_batch_norm, where you update the running_mean and running_var you were "
                        "given, and whether every rank gets there.",
                  how="On every rank, change the given tensors in place, each to a blend of its old value and the "
                      "batch statistic weighted by momentum; scale the variance to its unbiased form first, with the "
                      "count of values over every rank.")),
        Check("the gradient of the input equals global batch norm's", 3, _gradient,
              hint=Hint(
                  idea="Each rank's loss depends on every rank's x through the shared mean and variance, so the "
                       "gradient of x must collect what every rank's loss contributes; autograd does not see a plain "
                       "dist.all_reduce.",
                  section="2. Synchronized batch norm",
                  where="The exchange in sync_batch_norm's forward pass: whether autograd records it, and what its "
                        "backward does.",
                  how="Make the exchange one that autograd passes through and whose backward adds up the ranks' "
                      "gradients of the statistics: a differentiable collective (the functional collectives), or "
                      "an autograd Function of your own whose backward all-reduces. Detach nothing on the way.",
                  lines_of=("collective",))),
        Check("one collective per forward pass, not one per statistic", 2, _one_collective,
              hint=Hint(
                  idea="Every collective pays a fixed round trip whatever it carries, so the statistics travel "
                       "together, in one exchange per forward pass.",
                  section="What it costs",
                  where="The forward part of sync_batch_norm: every collective or message it makes.",
                  how="Put everything the ranks exchange into one tensor, make one collective on it, and split "
                      "the result back into its parts.",
                  lines_of=("collective",))),
    ],
)
