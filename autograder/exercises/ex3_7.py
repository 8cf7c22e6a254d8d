"""Exercise 3.7: ZeRO stage 1 built by hand: ZeroAdam(params, lr), with owned() and moments().

Every rank holds the same model and, each step, the gradient of its own shard of a global batch; the
student's optimizer must leave every rank with the weights DDP with Adam would give, while each rank
keeps Adam's moments for an even share of the flattened parameters only. The grader trains the
reference itself (Adam on the mean gradient, ddpcourse.optim.Adam) and reads what each rank says it
owns and the moments it keeps; the collectives of each step are read from the trace, between the
harness's markers around optimizer.step().
"""

from __future__ import annotations

import math

import torch

from autograder.checks import Check, every_rank_calls_the_same_collectives
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import flat, gradients_at
from ddpcourse.given.ex3_7 import LR, STEPS, model, shard
from ddpcourse.optim import Adam

TOL = dict(rtol=1e-4, atol=1e-6)
REDUCE_SCATTERS = ("reduce_scatter", "reduce_scatter_tensor", "reduce_scatter_tensor_autograd", "reduce_scatter_single",
                   "reduce_scatter_single_autograd")
ALL_GATHERS = ("all_gather", "all_gather_into_tensor", "all_gather_tensor", "all_gather_tensor_autograd", "all_gather_single",
               "all_gather_single_autograd")


def reference(seed: int, world_size: int) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """The parameters after each step of Adam on the mean of the ranks' gradients, and its final moments."""
    net = model(seed)
    params = list(net.parameters())
    adam = Adam(params, lr=LR)
    after = []
    for step in range(STEPS):
        current = flat(net)
        mean = sum(gradients_at(model(seed), current, *shard(seed, step, world_size, r))
                   for r in range(world_size)) / world_size
        for p, g in zip(params, mean.split([p.numel() for p in params])):
            p.grad = g.view_as(p).float()
        adam.step()
        after.append(flat(net))
    moments = [torch.cat([s[k].double().flatten() for s in adam.state]) for k in ("exp_avg", "exp_avg_sq")]
    return after, moments[0], moments[1]


def expected(seed: int) -> dict:
    return {"reference": {w: reference(seed, w) for w in (1, 2, 3)}}


def _equal_to_ddp_with_adam(runs):
    """Every rank's parameters against the reference; where no all-gather was made (charged by its own check),
    only the share each rank updated itself."""
    gathered = _all_gathered(runs) is None
    for world in runs:
        after, _, _ = runs.params["reference"][world.world_size]
        shares = _shares(world) if not gathered else None
        for step in range(STEPS if gathered else 1):  # without it, later steps start from stale weights
            for r in world.ranks:
                got = r.kept(f"parameters after step {step}")
                if got is None:
                    return f"{world.label}: rank {r.rank}'s parameters after step {step} were not recorded"
                part = slice(*shares[r.rank]) if isinstance(shares, dict) else slice(None)
                if not torch.allclose(got[part], after[step][part], **TOL):
                    return (f"{world.label}, step {step}: rank {r.rank}'s parameters differ from DDP with Adam "
                            f"by up to {(got[part] - after[step][part]).abs().max().item():.3g}"
                            + _why_different(world, r, step))


def _why_different(world, r, step) -> str:
    mine = r.kept(f"parameters after step {step}")
    others = [q.kept(f"parameters after step {step}") for q in world.ranks if q is not r]
    if any(o is not None and not torch.allclose(o, mine, **TOL) for o in others):
        return "; the ranks do not even agree with each other: each rank's updated share must reach every rank"
    return ""


def _shares(world) -> dict[int, tuple[int, int]] | str:
    found = {}
    for r in world.ranks:
        result = r.result if isinstance(r.result, dict) else {}
        if "error" in result:
            return f"{world.label}: rank {r.rank}'s owned() or moments() raised {result['error']}"
        owned = result.get("owned")
        if not (isinstance(owned, list) and len(owned) == 2 and all(isinstance(v, int) for v in owned)):
            return f"{world.label}: rank {r.rank}'s owned() did not return (start, stop)"
        found[r.rank] = tuple(owned)
    return found


def _even_share(runs):
    n = flat(model(0)).numel()
    for world in runs:
        shares = _shares(world)
        if isinstance(shares, str):
            return shares
        ranges = sorted(shares.values())
        if ranges[0][0] != 0 or ranges[-1][1] != n or any(a[1] != b[0] for a, b in zip(ranges, ranges[1:])) \
                or any(start >= stop for start, stop in ranges if world.world_size <= n):
            return (f"{world.label}: the ranks own {[shares[r] for r in sorted(shares)]} of the {n} flattened "
                    "parameters: together they must own each element exactly once")
        fair = math.ceil(n / world.world_size)
        rank, (start, stop) = max(shares.items(), key=lambda kv: kv[1][1] - kv[1][0])
        if stop - start > fair:
            return (f"{world.label}: rank {rank} owns {stop - start} of the {n} elements, more than "
                    f"⌈{n}/{world.world_size}⌉ = {fair}: the partition is not even, so that rank's optimizer "
                    "state is the job's peak (cut the flat vector, not whole tensors)")


def _moments_of_its_share(runs):
    n = flat(model(0)).numel()
    values_right = _equal_to_ddp_with_adam(runs) is None and _all_gathered(runs) is None  # else charged there
    for world in runs:
        shares = _shares(world)
        if isinstance(shares, str):
            return None  # charged by the check of the share
        _, exp_avg, exp_avg_sq = runs.params["reference"][world.world_size]
        for r in world.ranks:
            start, stop = shares[r.rank]
            sizes = r.result.get("moment_sizes")
            if sizes != [stop - start] * 2:
                whole = " (every element's: the whole model's state)" if sizes and sizes[0] >= n else ""
                return (f"{world.label}: rank {r.rank} keeps moments of {sizes} elements{whole}; it owns "
                        f"{stop - start}: each rank keeps Adam's state for its own share only")
            if values_right and 0 <= start <= stop <= n:
                beyond = _state_beyond_its_share(r.result.get("held") or [], exp_avg_sq, start, stop)
                if beyond:
                    return (f"{world.label}: rank {r.rank} owns elements {start}-{stop}, but its optimizer keeps "
                            f"Adam's second moments of elements {beyond} too: it steps the whole model's state "
                            "and returns a slice of it (each rank keeps and updates its own share's only)")
                for name, want in (("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
                    got = torch.tensor(r.result.get(name), dtype=torch.float64)
                    if got.shape != want[start:stop].shape or not torch.allclose(got, want[start:stop], rtol=1e-3,
                                                                                 atol=1e-9):
                        return (f"{world.label}: rank {r.rank}'s {name} for elements {start}-{stop} differs from "
                                "full Adam's there: the moments must be those of the mean gradient")


def _state_beyond_its_share(held: list, want: torch.Tensor, start: int, stop: int) -> str | None:
    """Where a tensor the optimizer keeps holds full Adam's second moments of elements outside [start, stop):
    a flat tensor laid out as the model (padded or not), or one of a single parameter's shape."""
    n = want.numel()
    offsets, at = [], 0
    for p in model(0).parameters():
        offsets.append((at, p.numel()))
        at += p.numel()
    for values in held:
        t = torch.tensor(values, dtype=torch.float64)
        places = [(0, n)] if t.numel() >= n else [(o, k) for o, k in offsets if k == t.numel()]
        for offset, k in places:
            outside = [i for i in range(offset, offset + k) if not start <= i < stop]
            if not outside:
                continue
            index = torch.tensor(outside)
            if torch.allclose(t[index - offset], want[index], rtol=1e-3, atol=1e-9) and want[index].abs().max() > 0:
                return f"{outside[0]}-{outside[-1] + 1}"
    return None


def _step_calls(r, step: int) -> list[dict]:
    """The collectives the student's code started during optimizer.step() of `step`."""
    marks = [k for k, e in enumerate(r.events) if e.get("kind") == "phase" and e.get("step") == step]
    if len(marks) != 2:
        return []
    return [e for e in r.events[marks[0]:marks[1]] if e.get("kind") == "collective" and e.get("caller")]


def _each_step(runs):
    """(world, rank, step, the collectives it started in optimizer.step()) where several ranks exchange."""
    for world in runs:
        if world.world_size > 1:
            for r in world.ranks:
                for step in range(STEPS):
                    yield world, r, step, [e.get("op") for e in _step_calls(r, step)]


def _reduce_scattered(runs):
    for world, r, step, ops in _each_step(runs):
        if "all_reduce" in ops:
            return (f"{world.label}, step {step}: rank {r.rank} all-reduced during the step: every rank "
                    "then receives every gradient, and ZeRO-1 needs each rank's own share only "
                    "(a reduce-scatter sends half as much)")
        if not any(op in REDUCE_SCATTERS for op in ops):
            return (f"{world.label}, step {step}: rank {r.rank} made no reduce-scatter during the step "
                    f"(it called {ops or 'no collective'})")


def _all_gathered(runs):
    for world, r, step, ops in _each_step(runs):
        if not any(op in ALL_GATHERS for op in ops):
            return (f"{world.label}, step {step}: rank {r.rank} made no all-gather during the step "
                    f"(it called {ops or 'no collective'}): each rank's updated share reaches the others "
                    "with one all-gather")


def _work(runs):
    if not any(e.get("caller") for w in runs for r in w.ranks for e in r.of("collective")) and \
            not any(r.kept("parameters after step 0") is not None and w.world_size > 1 for w in runs for r in w.ranks):
        return "no rank called a collective: ZeroAdam does not exchange anything yet"


EXERCISE = Exercise(
    id="3.7",
    title="ZeRO stage 1 by hand: a reduce-scatter, a sharded Adam step, an all-gather",
    kind="function", on_cpu=True,
    entry="ZeroAdam",
    params=lambda seed: {"seed": seed},
    expected=expected,
    work=_work,
    checks=[
        Check("after every step every rank's parameters equal DDP with Adam", 5, _equal_to_ddp_with_adam,
              hint=Hint(
                  idea="ZeRO-1 changes where Adam's state lives, not the update: after every step, every rank holds "
                       "the weights DDP with Adam gives, Adam on the mean of the ranks' gradients.",
                  section="3. Memory per rank: what ZeRO removes",
                  where="step: what the reduce-scattered sums are divided by, Adam's update of your share (its step "
                        "count and bias corrections), and how the updated shares get back into every parameter.",
                  how="Divide by the world size, before or after the reduce-scatter, so that Adam sees the mean "
                      "gradient; apply torch.optim.Adam's update to your share only; then gather every rank's updated "
                      "share and copy the whole flat vector back into the parameters on every rank.")),
        Check("each rank owns an even, contiguous share of the flattened parameters, together all of them once",
              3, _even_share,
              hint=Hint(
                  idea="ZeRO as the paper does it cuts the flattened parameters into W contiguous pieces of at most "
                       "N over W rounded up, which cover every element once; dealing out whole tensors cannot be "
                       "that even.",
                  section="4. ZeRO stage 1: `ZeroRedundancyOptimizer`",
                  where="__init__, where you work out this rank's range, and what owned returns.",
                  how="Cut the flat vector, not the tensors, into W consecutive ranges in rank order that together "
                      "cover it once, none longer than the number of elements over the world size rounded up. Pad "
                      "only the buffers of the collectives, never the range you report.")),
        Check("each rank keeps Adam's moments for its own share only, equal to full Adam's there", 3,
              _moments_of_its_share,
              hint=Hint(
                  idea="Each rank keeps Adam's two moments for the elements it owns and for no others: that is the "
                       "memory ZeRO-1 saves. There they equal full Adam's moments of the mean gradient.",
                  section="3. Memory per rank: what ZeRO removes",
                  where="__init__, where you create the moments; step, where you update them; and what moments "
                        "returns.",
                  how="Create the two moments with the size of your own range only and update them with the mean "
                      "gradient of that range; do not keep state for the whole model and hand out a slice of it.")),
        Check("the gradients are reduce-scattered (each rank receives its share's sum), not all-reduced", 3,
              _reduce_scattered,
              hint=Hint(
                  idea="Each rank needs only the summed gradients of its own share: one reduce-scatter delivers "
                       "exactly that, where an all-reduce sends every rank every gradient.",
                  section="3. Memory per rank: what ZeRO removes",
                  where="step: the collective that combines the ranks' gradients.",
                  how="Flatten the gradients, cut them along the ranks' shares, pad the pieces to one size and "
                      "reduce-scatter them, as one tensor or as a list, so that each rank receives the sum of its own "
                      "piece; make no all-reduce in the step.",
                  lines_of=("collective",))),
        Check("the updated shares reach every rank by an all-gather", 2, _all_gathered,
              hint=Hint(
                  idea="After each rank updates its own share, one all-gather gives every rank every updated share, "
                       "so that all ranks hold the same new weights.",
                  section="3. Memory per rank: what ZeRO removes",
                  where="step, after the Adam update of your share: how it reaches the other ranks.",
                  how="All-gather the ranks' updated pieces, padded to one size, on every rank; then drop the padding "
                      "and copy the flat result back into the parameters.",
                  lines_of=("collective",))),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 1,
              every_rank_calls_the_same_collectives, needs="partial",
              hint=Hint(
                  idea="A collective returns only once every rank has called it, in the same order: a rank that "
                       "skips one, or makes another, leaves the others waiting.",
                  section="1:Every rank calls every collective, in the same order",
                  where="step: every collective it makes, and any test of the rank around one.",
                  how="Make the same collectives, in the same order, on every rank, outside any branch on the rank; "
                      "let the rank decide only which piece of the result is its own.",
                  lines_of=("collective",))),
    ],
)
