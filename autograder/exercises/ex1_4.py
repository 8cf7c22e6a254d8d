"""Exercise 1.4: a tensor-parallel MLP: shard_weights(A, B, rank, world_size) and tensor_parallel_mlp(x, a, b).

shard_weights is judged on weights of its own. The MLP then runs on shards the harness cuts from
other weights, which never exist whole on a rank: the output can be right only through
communication, and a wrong split is charged once. The loss is a fixed random weighting of the
output, the same on every rank, so every rank holds the whole dL/dY, as in a transformer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from autograder.checks import Check, first_records, scale_of
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex1_4 import D, HIDDEN, ROWS, columns, inputs, weights

TOL = dict(rtol=1e-4, atol=1e-6)
TERMS = ("output", "input's gradient", "first shard's gradient", "second shard's gradient")


def reference(seed: int, world_size: int) -> dict[str, list[torch.Tensor]]:
    """Per rank: the unsplit MLP's output and input gradient, and the gradient of the rank's shards.

    Also each rank's own terms (its partial output, its part of the input's gradient), which a
    missing all-reduce leaves behind.
    """
    A, B = (t.clone().double().requires_grad_() for t in weights(seed, 1))
    x, weighting = (t.double() for t in inputs(seed))
    x.requires_grad_()
    y = F.gelu(x @ A) @ B
    (y * weighting.double()).sum().backward()
    found = {name: [] for name in (*TERMS, "own output", "own input's gradient", "own output of the summed input")}
    for r in range(world_size):
        mine = columns(r, world_size)
        found["output"].append(y.detach())
        found["input's gradient"].append(x.grad)
        found["first shard's gradient"].append(A.grad[:, mine])
        found["second shard's gradient"].append(B.grad[mine, :])
        xr = x.detach().clone().requires_grad_()
        partial = F.gelu(xr @ A.detach()[:, mine]) @ B.detach()[mine, :]
        (partial * weighting.double()).sum().backward()
        found["own output"].append(partial.detach())
        found["own input's gradient"].append(xr.grad)
        found["own output of the summed input"].append(F.gelu(world_size * x.detach() @ A.detach()[:, mine])
                                                       @ B.detach()[mine, :])
    return found


def _shards(runs):
    for world in runs:
        w = world.world_size
        held, problem = first_records(world, "shards", "shard_weights")
        if problem:
            return problem
        if len(held) < w:
            continue  # a rank that never got this far: told as a crash
        for rank, e in held.items():
            problem = _one_rank_shards(e, rank, w)
            if problem:
                return f"world size {w}: {problem}"
        owners = {}
        for rank, e in held.items():
            for c in e["columns"]:
                owners.setdefault(c, []).append(rank)
        repeated = next((c for c in sorted(owners) if len(owners[c]) > 1), None)
        if repeated is not None:
            return (f"world size {w}: column {repeated} of A is on ranks {owners[repeated]}: each column (and the "
                    "matching row of B) belongs to exactly one rank")
        missing = [c for c in range(HIDDEN) if c not in owners]
        if missing:
            return f"world size {w}: {len(missing)} of A's {HIDDEN} columns are on no rank (e.g. column {missing[0]})"


def _one_rank_shards(e: dict, rank: int, w: int) -> str | None:
    per = HIDDEN // w
    a_shape, b_shape = e.get("a_shape"), e.get("b_shape")
    if a_shape != [D, per]:
        return (f"rank {rank}'s shard of A has shape {tuple(a_shape or ())}; A ({D} x {HIDDEN}) is split by columns "
                f"(its second dimension), {per} per rank: shape ({D}, {per})")
    if b_shape != [per, D]:
        return (f"rank {rank}'s shard of B has shape {tuple(b_shape or ())}; B ({HIDDEN} x {D}) is split by rows "
                f"(its first dimension), the rows that match the rank's columns of A: shape ({per}, {D})")
    cols, rows = e.get("columns", []), e.get("rows", [])
    if None in cols:
        return f"rank {rank}'s shard of A holds values that are not columns of A (a copy of A's values is fine)"
    if None in rows:
        return f"rank {rank}'s shard of B holds values that are not rows of B"
    if cols != rows:
        return (f"rank {rank} holds columns {_short(cols)} of A but rows {_short(rows)} of B: hidden unit k is "
                "column k of A and row k of B, so each rank needs the rows of B that match its columns of A, "
                "in the same order")
    return None


def _short(indices: list[int]) -> str:
    if indices and indices == list(range(indices[0], indices[0] + len(indices))):
        return f"{indices[0]}-{indices[-1]}"
    return str(indices[:8])[:-1] + (", ...]" if len(indices) > 8 else "]")


def _kept(r, name: str, w: int) -> torch.Tensor | None:
    """One of TERMS, shaped, as the rank recorded it, or None."""
    parts = r.kept_parts("output and gradients", ((ROWS, D), (ROWS, D), (D, HIDDEN // w), (HIDDEN // w, D)))
    return None if parts is None else dict(zip(TERMS, parts))[name]


def _output(runs):
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        want = reference(seed, w)
        for r in world.ranks:
            state = r.result.get("output") if isinstance(r.result, dict) else None
            if state == "missing":
                return f"world size {w}: rank {r.rank}'s tensor_parallel_mlp returned None, not the output Y"
            if state == "shape":
                return (f"world size {w}: rank {r.rank}'s output has shape {tuple(r.result.get('shape') or ())}; "
                        f"Y has the input's shape, ({ROWS}, {D}), on every rank")
            got, whole = _kept(r, "output", w), want["output"][r.rank]
            if got is None:
                return f"world size {w}: rank {r.rank}'s output was not recorded"
            if torch.allclose(got, whole, **TOL):
                continue
            if w > 1 and torch.allclose(got, want["own output"][r.rank], **TOL):
                return (f"world size {w}: rank {r.rank}'s output is only its own partial result, GeLU(x a) b: the "
                        "partial results of the row-parallel layer must be summed over the ranks (g's forward)")
            k = scale_of(got, whole)
            if k is not None:
                return (f"world size {w}: rank {r.rank}'s output is {k:.4g} times Y"
                        + (": the partial results were summed twice" if abs(k - w) < 1e-3 * w else ""))
            if w > 1 and torch.allclose(got, want["own output of the summed input"][r.rank], **TOL):
                return (f"world size {w}: rank {r.rank}'s output is its own partial result computed from the input "
                        f"summed over the ranks ({w}x): the forward all-reduce belongs after the row-parallel layer "
                        "(g), not before the column-parallel one (f, the identity forward)")
            gap = (got - whole).abs().nan_to_num(float("inf")).max().item()
            return f"world size {w}: rank {r.rank}'s output differs from the unsplit MLP's by up to {gap:.3g}"


def _gradients(runs):
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        want = reference(seed, w)
        for r in world.ranks:
            if isinstance(r.result, dict) and r.result.get("output") == "no grad":
                return (f"world size {w}: rank {r.rank}'s output does not require grad, so no gradient reaches x, a "
                        "or b: the output must come out of autograd's graph (no detach, no torch.no_grad)")
            for name in TERMS[1:]:
                got, whole = _kept(r, name, w), want[name][r.rank]
                if got is None:
                    return f"world size {w}: rank {r.rank}'s {name} was not recorded"
                if torch.allclose(got, whole, **TOL):
                    continue
                return f"world size {w}: rank {r.rank}'s {name} " + _what_it_is(got, whole, want, r.rank, w, name)


def _what_it_is(got, whole, want, rank, w, name) -> str:
    if torch.isnan(got).all():
        return "is missing: backward never reached it"
    k = scale_of(got, whole)
    if k is not None and w > 1 and abs(k - w) < 1e-3 * w:
        return (f"is {w} times the unsplit MLP's: a gradient was summed over the ranks where it was already whole; "
                "g's backward is the identity, as every rank holds the whole dL/dY "
                "(torch.distributed.nn.functional.all_reduce all-reduces it again)")
    if k is not None:
        return f"is {k:.4g} times the unsplit MLP's: scaled by {k:.4g} somewhere in the backward pass"
    if name == "input's gradient" and w > 1 and torch.allclose(got, want["own input's gradient"][rank], **TOL):
        return ("is only this rank's own term of the sum: the backward pass must all-reduce it (f's backward); "
                "dist.all_reduce alone is invisible to autograd")
    gap = (got - whole).abs().nan_to_num(float("inf")).max().item()
    return f"differs from the unsplit MLP's by up to {gap:.3g}"


def _phases(r) -> dict[str, list[dict]]:
    """The communication calls made in the forward pass and in the backward pass."""
    return {phase: [e for e in r.windows(phase, end).get(None, []) if e.get("kind") == "enter"]
            for phase, end in (("forward", "backward"), ("backward", "backward_done"))}


def _communication(runs):
    for world in sorted(runs, key=lambda w: -w.world_size):
        w = world.world_size
        for r in world.ranks:
            for phase, calls in _phases(r).items():
                what = "the output" if phase == "forward" else "the input's gradient"
                other = [c for c in calls if c.get("call") != "all_reduce"]
                if other:
                    where = f" at {other[0]['caller']}" if other[0].get("caller") else ""
                    return (f"world size {w}: rank {r.rank} called {other[0].get('call')}{where} in the {phase} pass; "
                            f"tensor parallelism needs only an all-reduce of {what}")
                wrong_size = [c for c in calls if c.get("shape") != [ROWS, D]]
                if wrong_size:
                    where = f" at {wrong_size[0]['caller']}" if wrong_size[0].get("caller") else ""
                    return (f"world size {w}: rank {r.rank} all-reduced a tensor of shape "
                            f"{tuple(wrong_size[0].get('shape') or ())}{where} in the {phase} pass; the one all-reduce "
                            f"there is of {what}, shape ({ROWS}, {D})")
                if len(calls) > 1:
                    return (f"world size {w}: rank {r.rank} called all_reduce {len(calls)} times in the {phase} pass "
                            f"(at {', '.join(sorted({str(c.get('caller') or 'inside torch') for c in calls}))}); "
                            f"one, of {what}, is all it needs")


def _work(runs):
    if not any(calls for w in runs for r in w.ranks for calls in _phases(r).values()):
        return "no rank communicated in tensor_parallel_mlp: the ranks' partial results are summed with all-reduces"


HINTS = {
    "shards": Hint(
        idea="The Megatron split: A is cut by columns and B by the matching rows, so each hidden unit lives on "
             "one rank only, as its column of A and its row of B, and every rank holds 1/W of each weight.",
        section="6. Tensor parallelism",
        where="Look at `shard_weights`: which dimension of each weight you cut, how this rank's piece is chosen "
              "from its rank, and whether the rows of B it keeps are the ones that match its columns of A.",
        how="Cut A along its second dimension and B along its first into W equal pieces, and give each rank the "
            "same hidden units in both, in the same order, so that every hidden unit is on exactly one rank."),
    "output": Hint(
        idea="Each rank computes only a partial result from its own columns and rows; the output Y is the sum of "
             "those partial results over the ranks, the same on every rank.",
        section="6. Tensor parallelism",
        where="Look at `tensor_parallel_mlp` and at the forward passes of your two autograd functions: which "
              "tensor is summed over the ranks going forward, and how many times.",
        how="Sum over the ranks once, after the row-parallel multiplication (g's forward), without changing a "
            "tensor autograd saved for the backward pass; the input goes forward untouched (f's forward is the "
            "identity).",
        lines_of=("collective",)),
    "gradients": Hint(
        idea="The backward pass needs its own all-reduce: every rank holds the whole gradient of the output, but "
             "the input's gradient is a sum of one term per rank, and a plain all-reduce is invisible to "
             "autograd.",
        section="6. Tensor parallelism",
        where="If the output check fails too, the forward pass is the cause: fix it first. Otherwise look at the "
              "backward methods of your two autograd functions, and at whether `tensor_parallel_mlp` "
              "puts both of them in autograd's graph (no detach, no `no_grad`): f on the input before the first "
              "multiplication, g on the partial result after the second.",
        how="Make f's backward sum the incoming gradient over the ranks and g's backward pass it on unchanged, "
            "and apply f and g through autograd so that backward calls them; a gradient summed in both places "
            "comes out W times too large.",
        lines_of=("collective",)),
    "communication": Hint(
        idea="Tensor parallelism communicates exactly twice per step: one all-reduce of the output going forward "
             "and one of the input's gradient going backward; everything else each rank computes from its own "
             "shards.",
        section="6. Tensor parallelism",
        where="Look at every communication call that `tensor_parallel_mlp` reaches, those in your autograd "
              "functions included: its kind, the tensor it sends, and in which pass it runs.",
        how="Keep one all-reduce of the output-shaped partial result in g's forward and one of the input's "
            "gradient in f's backward, and remove any other gather, broadcast or message, and any second "
            "all-reduce in the same pass.",
        lines_of=("enter",)),
}


EXERCISE = Exercise(
    id="1.4",
    title="a tensor-parallel MLP",
    kind="function", on_cpu=True,
    entry="tensor_parallel_mlp",
    params=lambda seed: {"seed": seed},
    work=_work,
    checks=[
        Check("shard_weights: A split by columns, B by the matching rows, 1/W of each on every rank", 2, _shards,
              needs="partial", hint=HINTS["shards"]),
        Check("the output equals the unsplit MLP's on every rank", 3, _output, hint=HINTS["output"]),
        Check("the gradients of the input and of each rank's shards equal the unsplit MLP's", 4, _gradients,
              hint=HINTS["gradients"]),
        Check("communication: one all-reduce of the output forward, one of the input's gradient backward, "
              "nothing more", 2, _communication, hint=HINTS["communication"]),
    ],
)
