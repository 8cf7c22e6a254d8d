"""Exercise 1.1: data parallelism by hand: broadcast_parameters(model) and average_gradients(model).

Every rank starts from weights of its own, so a broadcast that does nothing shows. Each step the
harness computes the rank's local gradient on its shard of the global batch, calls the student's
average_gradients and steps plain SGD itself. The grader recomputes every local gradient from the
parameters the rank held, so each step is judged on its own: a wrong broadcast is not charged again
as wrong gradients.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from autograder.checks import Check, every_rank_calls_the_same_collectives
from autograder.exercises import Exercise
from autograder.reference import gradients_at, parameter_blocks
from autograder.rig import join_group, raised
from ddpcourse import make_model, toy_dataset

BATCH, STEPS, LR = 12, 3, 0.2  # a global batch of 12 splits evenly over 1, 2 or 3 ranks
TOL = dict(rtol=1e-4, atol=1e-6)


def start_seed(seed: int, rank: int) -> int:
    return 1000 * (seed + 1) + rank  # a different initial model on every rank


def shard(seed: int, step: int, world_size: int, rank: int):
    x, y = toy_dataset(n=BATCH * STEPS, seed=seed).tensors
    batch = slice(step * BATCH, (step + 1) * BATCH)
    return x[batch][rank::world_size], y[batch][rank::world_size]


def _flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().flatten() for t in tensors])


def _flat_grads(model) -> torch.Tensor:
    return _flat(p.grad if p.grad is not None else torch.full_like(p, float("nan")) for p in model.parameters())


def harness(student, rank, layout, rec, seed, **_):
    join_group()
    model = make_model(start_seed(seed, rank))
    student.broadcast_parameters(model)
    rec.keep("after broadcast_parameters", _flat(model.parameters()))
    for step in range(STEPS):
        x, y = shard(seed, step, layout.world_size, rank)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        student.average_gradients(model)
        rec.keep(f"gradients at step {step}", _flat_grads(model))
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p -= LR * p.grad
        rec.keep(f"parameters after step {step}", _flat(model.parameters()))
    frozen = _with_a_frozen_parameter(student, model, *shard(seed, 0, layout.world_size, rank))
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return {"frozen": frozen}


def _with_a_frozen_parameter(student, model, x, y) -> str | None:
    """What went wrong when one parameter has no gradient (it is frozen), or None.

    Frozen the same way on every rank, so every rank fails at the same point if it fails at all,
    and the collectives stay matched for the rest of the run.
    """
    frozen = model.net[0].bias
    frozen.requires_grad_(False)
    model.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    try:
        student.average_gradients(model)
    except Exception as exc:
        return f"raised {raised(exc)}"
    if frozen.grad is not None and torch.count_nonzero(frozen.grad):
        return "gave the frozen parameter (net.0.bias) a gradient that is not zero"
    return None


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
                        f"{owner}'s initial weights, not rank 0's"
                        + (": it kept its own (broadcast from src=0 on every rank, not from its own rank)"
                           if owner == r.rank else ""))
            wrong = [name for name, part in blocks if not torch.allclose(got[part], starts[0][part], **TOL)]
            return (f"{world.label}: after broadcast_parameters rank {r.rank}'s {', '.join(wrong)} "
                    f"differ(s) from rank 0's; the other parameters match")


def _initial(runs, rank: int) -> torch.Tensor:
    return _flat(make_model(start_seed(runs.params["seed"], rank)).parameters()).double()


def _gradients_averaged(runs):
    seed = runs.params["seed"]
    blocks = parameter_blocks(make_model(0))
    for world in runs:
        w = world.world_size
        for step in range(STEPS):
            before = "after broadcast_parameters" if step == 0 else f"parameters after step {step - 1}"
            held = [r.kept(before) for r in world.ranks]
            got = [r.kept(f"gradients at step {step}") for r in world.ranks]
            if any(v is None for v in held + got):
                return f"world size {w}: the gradients of step {step} were not recorded on every rank"
            local = [gradients_at(make_model(0), held[r], *shard(seed, step, w, r)) for r in range(w)]
            mean = sum(local) / w
            for r in range(w):
                for name, part in blocks:
                    if not torch.allclose(got[r][part], mean[part], **TOL):
                        message = (f"world size {w}, step {step}: rank {r}'s gradient of {name} "
                                   f"{_what_it_is(got[r][part], mean[part], local[r][part], w)}")
                        if r > 0 and any(torch.allclose(got[0][part], k * mean[part], **TOL) for k in (1, w)):
                            message += ", while rank 0's is right: the result must reach every rank (all_reduce)"
                        return message


def _what_it_is(got, mean, local, w) -> str:
    if torch.isnan(got).any():
        return "is missing (None) after average_gradients"
    if w > 1 and torch.allclose(got, mean * w, **TOL):
        return f"is {w} times the mean over the ranks: summed, not divided by the world size"
    if w > 1 and torch.allclose(got, mean / w, **TOL):
        return f"is 1/{w} of the mean over the ranks: divided by the world size twice"
    if w > 1 and torch.allclose(got, local, **TOL):
        return ("is still this rank's own local gradient: not averaged, or averaged into a copy "
                "(all-reduce p.grad itself, in place)")
    gap = (got - mean).abs().max().item()
    return f"differs from the mean of the ranks' local gradients by up to {gap:.3g}"


def _frozen_parameter(runs):
    for world in runs:
        for r in world.ranks:
            problem = r.result.get("frozen") if isinstance(r.result, dict) else "returned nothing"
            if problem:
                return f"{world.label}: with a frozen parameter, average_gradients {problem}"


def _work(runs):
    if not any(e.get("caller") for w in runs for r in w.ranks for e in r.of("collective")):
        return "no rank called a collective: broadcast_parameters and average_gradients do nothing yet"


EXERCISE = Exercise(
    id="1.1",
    title="data parallelism by hand",
    kind="function", on_cpu=True,
    entry="average_gradients",
    harness=harness,
    params=lambda seed: {"seed": seed},
    work=_work,
    checks=[
        Check("after broadcast_parameters every rank holds rank 0's weights", 3, _same_weights_as_rank_0,
              needs="partial",
              hint="dist.broadcast(p.data, src=0) for every parameter: the same source on every rank"),
        Check("after average_gradients every gradient is the mean over the ranks (in place)", 4,
              _gradients_averaged,
              hint="dist.all_reduce(p.grad) sums in place; then divide by dist.get_world_size()"),
        Check("a frozen parameter (no gradient) is left alone, without an error", 2, _frozen_parameter,
              hint="skip parameters whose p.grad is None, as every rank has the same ones"),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 1,
              every_rank_calls_the_same_collectives, needs="partial",
              hint="a collective blocks until every rank calls it: call it on all ranks"),
    ],
)
