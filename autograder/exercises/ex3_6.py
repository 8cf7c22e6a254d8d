"""Exercise 3.6: predict, then measure, the training state each rank holds under DDP, ZeRO-1 and FSDP:
predict(scheme, shapes, world_size) -> one {"parameters", "gradients", "optimizer"} dict of bytes per rank.

The harness asks for the predictions first, then trains one step of the same model under each
scheme and measures, on each rank, the bytes of its parameters, gradients and Adam moments. The
checks compare the predictions with the grader's exact count (gradients and moments with what the
student's own parameters imply, so that one wrong rule is charged once) and show what the ranks
measured beside it (tests prove the count and the measurements agree).
"""

from __future__ import annotations

from autograder.checks import Check, each_rank
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex3_6 import SCHEMES, shapes_of

PARTS = ("parameters", "gradients", "optimizer")
FLOAT = 4  # bytes per float32 number


# The exact count --------------------------------------------------------------------------


def zero1_owners(shapes, w: int) -> list[int]:
    """The rank ZeroRedundancyOptimizer gives each tensor: largest first, to the rank with the fewest
    numbers so far (the lowest such rank)."""
    sizes = [_numel(s) for s in shapes]
    owners, held = [0] * len(shapes), [0] * w
    for i in sorted(range(len(shapes)), key=lambda i: -sizes[i]):  # stable: equal sizes keep their order
        rank = held.index(min(held))
        owners[i], held[rank] = rank, held[rank] + sizes[i]
    return owners


def fsdp_rows(rows: int, w: int, rank: int) -> int:
    """The rows of a tensor that fully_shard leaves on `rank`: chunks of ceil(rows / w), in rank order."""
    chunk = -(-rows // w)
    return max(0, min(chunk, rows - rank * chunk))


def counted(scheme: str, shapes, w: int) -> list[dict[str, int]]:
    out = []
    for rank in range(w):
        whole = sum(_numel(s) for s in shapes)
        if scheme == "FSDP":
            share = sum(fsdp_rows(s[0], w, rank) * _numel(s[1:]) for s in shapes)
            out.append({"parameters": FLOAT * share, "gradients": FLOAT * share, "optimizer": 2 * FLOAT * share})
            continue
        if scheme == "ZeRO-1":
            owners = zero1_owners(shapes, w)
            mine = sum(_numel(s) for s, owner in zip(shapes, owners) if owner == rank)
        else:
            mine = whole
        out.append({"parameters": FLOAT * whole, "gradients": FLOAT * whole, "optimizer": 2 * FLOAT * mine})
    return out


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _predictions(world, r):
    """This rank's predictions by scheme, or the message saying why one cannot be read."""
    got = {}
    for event in r.of("predicted"):
        scheme, value = event.get("scheme"), event.get("value")
        if event.get("error"):
            return None, f"{world.label}: predict({scheme!r}, ...) raised {event['error']}"
        if not (isinstance(value, list) and len(value) == world.world_size
                and all(isinstance(v, dict) and all(isinstance(v.get(p), (int, float)) for p in PARTS) for v in value)):
            return None, (f"{world.label}: predict({scheme!r}, ...) returned {str(value)[:120]}, not "
                          f"a list of {world.world_size} dicts with numbers for {', '.join(PARTS)}")
        got[scheme] = value
    return got, None


def _part(part: str):
    """Each scheme's prediction of ``part`` against what it must be: the exact count for the parameters and
    for ZeRO-1's dealt-out moments; otherwise the student's own prediction of the parameters, which gradients
    (one per parameter) and Adam's two moments follow, so that a wrong rule for the parameters is charged once."""
    def verify(runs):
        seed = runs.params["seed"]
        shapes = shapes_of(seed)
        for world in sorted(runs, key=lambda w: -w.world_size):
            r = world.ranks[0]
            predicted, problem = _predictions(world, r)
            if problem:
                return problem
            for scheme in SCHEMES:
                exact = [c[part] for c in counted(scheme, shapes, world.world_size)]
                own = [v["parameters"] for v in predicted[scheme]]
                follows = part != "parameters" and not (part == "optimizer" and scheme == "ZeRO-1") and all(own)
                want = [2 * p if part == "optimizer" else p for p in own] if follows else exact
                said = [v[part] for v in predicted[scheme]]
                if said != want:
                    seen = [_measured(o, scheme).get(part) for o in world.ranks]
                    basis = ""
                    if follows and own != [c["parameters"] for c in counted(scheme, shapes, world.world_size)]:
                        each = "a gradient" if part == "gradients" else "two moments"
                        basis = f" (judged by your own prediction of the parameters, {own}: {each} for every parameter)"
                    return (f"{world.label}, {scheme}: you predicted {said} bytes of {part} per rank; "
                            f"the ranks measured {seen}{basis}")
    return verify


def _measured(r, scheme: str) -> dict:
    return next((e.get("value") or {} for e in r.of("measured") if e.get("scheme") == scheme), {})


def _work(runs):
    if not any(r.of("predicted") for _, r in each_rank(runs)):
        return "no rank got as far as predicting"


EXERCISE = Exercise(
    id="3.6",
    title="predict, then measure, the training state per rank",
    kind="function", on_cpu=True,
    drawn_as="The course's own run (what your predictions are measured against)",
    entry="predict",
    params=lambda seed: {"seed": seed},
    work=_work,
    warm_imports=("torch._dynamo", "torch.distributed.optim", "torch.distributed.fsdp"),
    timeout=40.0,
    checks=[
        Check("parameters per rank: whole under DDP and ZeRO-1, each tensor's rows cut in W under FSDP", 2,
              _part("parameters"),
              hint=Hint(
                  idea="DDP and ZeRO-1 keep every parameter whole on every rank; FSDP cuts each tensor along its "
                       "first dimension into chunks of rows, in rank order, so where W does not divide the rows the "
                       "last ranks get fewer, or none.",
                  section="5. FSDP: `fully_shard`",
                  where="predict, the parameters entry of each scheme, and under FSDP your count of one tensor's "
                        "rows on each rank when W does not divide them.",
                  how="Per tensor, take the chunk as the rows over W rounded up; rank r gets what is left of the rows "
                      "after r chunks, at most one chunk and never below zero, times the numbers per row, times 4 "
                      "bytes. Sum over the tensors; for DDP and ZeRO-1, count every tensor whole.")),
        Check("gradients per rank: like the parameters they belong to", 2, _part("gradients"),
              hint=Hint(
                  idea="Each gradient has its parameter's shape: ZeRO stage 1 shards only the optimizer state, so the "
                       "gradients are whole under DDP and ZeRO-1, and FSDP cuts them with their parameters.",
                  section="3. Memory per rank: what ZeRO removes",
                  where="predict, the gradients entry of each scheme, beside your parameters entry for the same rank.",
                  how="Give each rank, under each scheme, a float32 gradient for every parameter number it holds, "
                      "and for no other.")),
        Check("Adam's two moments per rank: whole under DDP, whole tensors dealt out under ZeRO-1, sharded under FSDP",
              3, _part("optimizer"),
              hint=Hint(
                  idea="Adam keeps two float32 moments for every parameter number whose state a rank holds: all of "
                       "them under DDP, whole tensors dealt out to the ranks under ZeRO-1, the rank's own rows "
                       "under FSDP.",
                  section="4. ZeRO stage 1: `ZeroRedundancyOptimizer`",
                  where="predict, the optimizer entry; for ZeRO-1, the order in which you deal the tensors out and "
                        "how you pick the rank that receives each.",
                  how="Count 8 bytes per number whose moments the rank keeps, step counters aside. For ZeRO-1, take "
                      "the tensors largest first and give each, whole, to the rank holding the fewest numbers so far, "
                      "the lowest such rank on a tie.")),
    ],
)
