"""Exercise 1.1: data parallelism by hand: broadcast_parameters(model) and average_gradients(model).

Every rank starts from weights of its own, so a broadcast that does nothing shows. Each step the
harness computes the rank's local gradient on its shard of the global batch, calls the student's
average_gradients and steps plain SGD itself. The grader recomputes every local gradient from the
parameters the rank held, so each step is judged on its own: a wrong broadcast is not charged again
as wrong gradients.
"""

from __future__ import annotations

import functools

import torch

from autograder.checks import Check, every_rank_calls_the_same_collectives, how_a_gradient_differs
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import averaged_gradients, flat, off_the_mean, parameter_blocks
from ddpcourse import make_model
from ddpcourse.given.ex1_1 import STEPS, head_of, make_two_heads, shard, start_seed

TOL = dict(rtol=1e-4, atol=1e-6)
STILL_LOCAL = "not averaged, or averaged into a copy (all-reduce p.grad itself, in place)"


def _whose(values: torch.Tensor, starts: list[torch.Tensor]) -> int | None:
    return next((k for k, s in enumerate(starts) if torch.allclose(values, s, **TOL)), None)


def _same_root(runs):
    """Every rank's broadcasts name rank 0 as their source (seen even when a mismatch hung the launch)."""
    for world in runs:
        for r in world.ranks:
            other = next((e for e in r.of("collective") if e.get("op") == "broadcast" and e.get("caller")
                          and e.get("root") not in (0, None)), None)
            if other is not None:
                return (f"{world.label}: rank {r.rank} broadcast with src={other['root']} at "
                        f"{other['caller']}; the source must be rank 0 on every rank"
                        + (", not each rank's own rank (each would send and none receive)"
                           if other["root"] == r.rank else ""))


def _same_weights_as_rank_0(runs):
    mismatch = _same_root(runs)
    if mismatch or not runs.complete:
        return mismatch
    blocks = parameter_blocks(make_model(0))
    for world in runs:
        starts = [_initial(runs, rank) for rank in range(world.world_size)]
        for r in world.ranks:
            got = r.kept("after broadcast_parameters")
            if got is None:
                return f"{world.label}: rank {r.rank}'s parameters were not recorded"
            if torch.allclose(got, starts[0], **TOL):
                continue
            owner = _whose(got, starts)
            if owner is not None:
                return (f"{world.label}: after broadcast_parameters rank {r.rank} holds rank "
                        f"{owner}'s initial weights, not rank 0's" + (_kept_its_own(r) if owner == r.rank else ""))
            wrong = [name for name, part in blocks if not torch.allclose(got[part], starts[0][part], **TOL)]
            return (f"{world.label}: after broadcast_parameters rank {r.rank}'s {', '.join(wrong)} "
                    f"differ(s) from rank 0's; the other parameters match")


def _kept_its_own(r) -> str:
    """Why a rank still holds its own weights, when every broadcast named the right source (_same_root)."""
    if not any(e.get("op") == "broadcast" for e in r.of("collective")):
        return ": it called no broadcast"
    return (": its broadcasts named src=0 but filled a copy of the parameters (parameters_to_vector, clone, "
            "torch.cat...), which nothing copied back; broadcast each p.data itself, in place, or copy the "
            "result back into the parameters")


def _initial(runs, rank: int) -> torch.Tensor:
    return flat(make_model(start_seed(runs.params["seed"], rank)))


def _gradients_averaged(runs):
    seed = runs.params["seed"]
    blocks = parameter_blocks(make_model(0))
    for world in runs:
        w = world.world_size
        for step in range(STEPS):
            before = "after broadcast_parameters" if step == 0 else f"parameters after step {step - 1}"
            found = averaged_gradients(world, step, before, lambda: make_model(0), functools.partial(shard, seed))
            if found is None:
                return f"world size {w}: the gradients of step {step} were not recorded on every rank"
            got, local = found
            off = off_the_mean(got, local, blocks, **TOL)
            if off:
                r, name, part, mean = off
                message = (f"world size {w}, step {step}: rank {r}'s gradient of {name} "
                           f"{how_a_gradient_differs(got[r][part], mean[part], local[r][part], w, STILL_LOCAL)}")
                if r > 0 and any(torch.allclose(got[0][part], k * mean[part], **TOL) for k in (1, w)):
                    message += ", while rank 0's is right: the result must reach every rank (all_reduce)"
                return message


def _frozen_parameter(runs):
    for world in runs:
        for r in world.ranks:
            problem = r.result.get("frozen") if isinstance(r.result, dict) else "returned nothing"
            if problem:
                return f"{world.label}: with a frozen parameter, average_gradients {problem}"


def _unused_on_some_ranks(runs):
    if _gradients_averaged(runs):
        return None  # gradients not averaged right even where every rank has them: charged there
    seed = runs.params["seed"]
    model = make_two_heads(seed)
    blocks = parameter_blocks(model)
    params = flat(model)
    for world in runs:
        w = world.world_size
        if w == 1:
            continue  # one rank's missing gradient is harmless: only with others does it shift the calls
        got = [r.result.get("unused") if isinstance(r.result, dict) else None for r in world.ranks]
        if any(g is None for g in got):
            continue  # a None gradient already failed in the frozen case: charged there
        if any(isinstance(g, str) for g in got):
            rank = next(k for k, g in enumerate(got) if isinstance(g, str))
            return f"{world.label}: with a head that rank {rank}'s forward did not use, average_gradients {got[rank]}"
        local = [_local(model, params, seed, w, rank) for rank in range(w)]
        mean = sum(local) / w
        for rank in range(w):
            values = torch.tensor([float(v) for v in got[rank]], dtype=torch.float64)  # NaN is recorded as 'nan'
            for name, part in blocks:
                if values.numel() != params.numel() or not torch.allclose(values[part], mean[part], **TOL):
                    return f"{world.label}: {_unused_message(rank, name, values[part], mean[part], local, part, w)}"


def _local(model, params, seed, w, rank) -> torch.Tensor:
    """Rank's own gradients on the two-headed model, zeros for the head its forward did not use."""
    x, y = shard(seed, 0, w, rank)
    torch.nn.utils.vector_to_parameters(params.float(), model.parameters())
    loss = torch.nn.functional.cross_entropy(model(x, head_of(rank)), y)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    return torch.cat([(g if g is not None else torch.zeros_like(p)).flatten()
                      for g, p in zip(grads, model.parameters())]).double()


def _unused_message(rank, name, got, mean, local, part, w) -> str:
    what = (f"rank {rank}'s forward used head_{head_of(rank)} only; after average_gradients its gradient of "
            f"{name}")
    if torch.isnan(got).any():
        return (f"{what} is still None, where the mean over the ranks is not: a parameter that got no "
                "gradient on a rank counts as zero there, and every rank ends up holding the mean")
    used = [local[r][part] for r in range(w)]
    paired = sum(_used_head(local, r, name, part) for r in range(w)) / w
    if w > 1 and torch.allclose(got, paired, **TOL) and not torch.allclose(got, mean, **TOL):
        return (f"{what} mixes head_a's gradients with head_b's: the ranks skipped different parameters, so "
                "their all-reduces paired one head on some ranks with the other head on the rest (collectives are "
                "matched by order, not by name); give every rank the same calls, zeros for a missing gradient")
    contributors = sum(1 for u in used if u.abs().sum() > 0)
    if contributors and w > 1 and torch.allclose(got, mean * w / contributors, **TOL):
        return (f"{what} is the mean over the {contributors} rank(s) that had a gradient; the mean is over all "
                f"{w} ranks, zeros where there was none (as DDP averages)")
    return f"{what} differs from the mean over the ranks (zeros where a rank had no gradient) by up to " \
           f"{(got - mean).abs().max().item():.3g}"


def _used_head(local, rank, name, part) -> torch.Tensor:
    """What a rank that skips its missing gradients all-reduces in `name`'s place: its own gradient there, or,
    where its forward did not use that head, the same parameter of the head it did use (same shape)."""
    head, rest = name.split(".", 1)
    if head not in ("head_a", "head_b") or head == f"head_{head_of(rank)}":
        return local[rank][part]
    return local[rank][dict(parameter_blocks(make_two_heads(0)))[f"head_{head_of(rank)}.{rest}"]]


def _work(runs):
    if not any(e.get("caller") for w in runs for r in w.ranks for e in r.of("collective")):
        return "no rank called a collective: broadcast_parameters and average_gradients do nothing yet"


HINTS = {
    "broadcast": Hint(
        idea="Data parallelism starts from the same weights everywhere: after broadcast_parameters every rank "
             "holds rank 0's initial weights, in its model's own parameters.",
        section="3. Data parallelism by hand",
        where="Look at `broadcast_parameters`: which tensor each broadcast fills, which rank it names as the "
              "source, and whether every parameter and every rank takes part.",
        how="Broadcast every parameter (or one flat tensor of all of them) with rank 0 as the source on every "
            "rank, and make sure the values land in the model's parameters themselves: what is broadcast into a "
            "copy must be copied back.",
        lines_of=("collective",)),
    "averaged": Hint(
        idea="After average_gradients every rank's `.grad` holds the mean of all ranks' local gradients: summed "
             "over the ranks, divided by the world size, in the gradient itself.",
        section="3. Data parallelism by hand",
        where="Look at `average_gradients`: the collective you call on each gradient (or on one bucket of them), "
              "what you divide by, and whether the result ends up in every parameter's `.grad` on every rank.",
        how="Use a collective that leaves the sum on every rank, not on one only, divide by the number of ranks "
            "exactly once, and work on the gradients in place (or copy a bucket's result back into them).",
        lines_of=("collective",)),
    "frozen": Hint(
        idea="A frozen parameter, one that does not require grad, has no gradient on any rank: average_gradients "
             "must leave it alone instead of failing on it.",
        section="3. Data parallelism by hand",
        where="Look at the loop of `average_gradients` over the parameters: what it does with a parameter that "
              "does not require grad, whose `.grad` is None on every rank.",
        how="Decide for each parameter from whether it requires grad, which is the same on every rank: leave the "
            "frozen ones out, so that every rank skips the same ones and its calls stay paired with the others'."),
    "unused": Hint(
        idea="A parameter that got no gradient on some ranks (their forward did not use it) counts as zero "
             "there, and every rank ends up with the mean over all ranks in its `.grad`, as DDP does.",
        section="Every rank calls every collective, in the same order",
        where="Look at what `average_gradients` does with a parameter that requires grad but whose `.grad` is "
              "None on this rank only, and whether every rank then makes the same calls, in the same order.",
        how="Let such a parameter take part with zeros on the ranks that have no gradient for it, so that every "
            "rank makes the same collective calls on the same parameters in the same order, and divide by the "
            "number of all ranks, not by the number that had a gradient."),
    "same_collectives": Hint(
        idea="A collective completes only when every rank calls it, and calls are paired by their order: a "
             "collective that only some ranks reach hangs the others or pairs the wrong tensors.",
        section="Every rank calls every collective, in the same order",
        where="Look for a collective in `broadcast_parameters` or `average_gradients` under a condition that "
              "differs between ranks, such as a test of the rank or of whether this rank has a gradient.",
        how="Make every collective call on every rank, in an order that does not depend on the rank; where only "
            "one rank needs the result, still call it everywhere and use the result where it is needed.",
        lines_of=("collective",)),
}


EXERCISE = Exercise(
    id="1.1",
    title="data parallelism by hand",
    kind="function", on_cpu=True,
    entry="average_gradients",
    params=lambda seed: {"seed": seed},
    work=_work,
    checks=[
        Check("after broadcast_parameters every rank holds rank 0's weights", 3, _same_weights_as_rank_0,
              needs="partial", hint=HINTS["broadcast"]),
        Check("after average_gradients every gradient is the mean over the ranks (in place)", 4,
              _gradients_averaged, hint=HINTS["averaged"]),
        Check("a frozen parameter (no gradient) is left alone, without an error", 2, _frozen_parameter,
              hint=HINTS["frozen"]),
        Check("a parameter unused on some ranks gets the mean over all ranks, zero where it had no gradient", 2,
              _unused_on_some_ranks, hint=HINTS["unused"]),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 1,
              every_rank_calls_the_same_collectives, needs="partial", hint=HINTS["same_collectives"]),
    ],
)
