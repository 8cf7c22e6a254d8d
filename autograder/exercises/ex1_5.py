"""Exercise 1.5: predict the costs: per_rank_costs(scheme, blocks, d, h, world_size, rows).

The student's function is pure arithmetic, called in a rank on several models and world sizes.
The grader counts the same quantities from what each rank would hold and send: the shapes of
every rank's shards (and Adam's two moments for each), and the messages of the schedules built
in exercises 1.2 to 1.4 (a ring all-reduce cut with tensor_split, GPipe's activations and
gradients, the Megatron MLP's two all-reduces per block). Each quantity is the busiest rank's.

Each launch also runs one training step of the first model under each scheme on its real ranks,
with the course's own ring all-reduce, pipeline and tensor-parallel MLP (ranks/exercises/ex1_5.py),
and measures what each rank holds (parameters, gradients, Adam's moments) and sends (the bytes of its
traced messages). A failed check shows those measurements beside the count; the tests prove the two
equal, with torch.optim.Adam and with the course's Adam that the graded ranks use.

Where the notebook holds the student's cells of 1.1-1.4, one more launch runs the same step with
their own code, and the last check (worth nothing: their mistakes there are charged in 1.1-1.4)
sets their predictions beside what their own code held and sent.
"""

from __future__ import annotations

import math

import torch

from autograder.checks import Check, Skip
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex1_5 import MEASURED, OWN, QUANTITIES, SCHEMES, cases

FLOAT = 4  # bytes of a float32
# Memory is counted exactly; traffic within 1%, so that 2(W-1)/W of a length W does not divide
# counts as much as the exact chunks of tensor_split.
RTOL = {"parameters": 1e-6, "gradients": 1e-6, "optimizer": 1e-6, "sent": 1e-2}


def _sent(r, events: list[dict]) -> int:
    """The bytes of the point-to-point messages rank `r` sent among `events`."""
    return sum(size for way, _, size, _ in r.messages(events) if way == "send")


def measured(world, scheme: str) -> dict[str, int] | None:
    """The busiest rank's measurements of `scheme` in this launch: held bytes as it reported them, sent
    bytes from its traced messages."""
    per_rank = []
    for r in world.ranks:
        done = next((e for e in r.of("measured") if e.get("index") == scheme), None)
        if done is None:
            return None
        sent = _sent(r, r.windows("measure", "measured").get(scheme, []))
        per_rank.append({**{q: done.get(q) for q in QUANTITIES if q != "sent"}, "sent": sent})
    return {q: max(m[q] for m in per_rank) for q in QUANTITIES}


def own_sent(world, exercise_id: str) -> tuple[int, list[str]]:
    """The busiest rank's bytes sent in the run of its cell of `exercise_id`: its messages, and for each
    built-in all-reduce what a ring all-reduce of that tensor sends (gloo's own algorithm is not traced).
    Also the other collectives it called, which are not counted."""
    w = world.world_size
    per_rank, others = [], set()
    for r in world.ranks:
        events = r.windows("own", "own_done").get(exercise_id, [])
        sent = _sent(r, events) + sum(ring_sent(math.prod(e.get("shape") or [0]), w, r.rank) for e in events
                                      if e.get("kind") == "enter" and e.get("call") == "all_reduce")
        others |= {str(e.get("op")) for e in events if e.get("kind") == "collective" and e.get("op") != "all_reduce"}
        per_rank.append(sent)
    return max(per_rank), sorted(others)


def _own_code(runs):
    world = runs.own
    if world is None:
        raise Skip("your own code of 1.1-1.4 did not run: it runs when 1.5 is checked in the notebook that "
                   "holds your cells of 1.1-1.4 (or that notebook is graded), once 1.5's own runs complete")
    w, (blocks, d, h, rows) = world.world_size, MEASURED
    results = next((x.ranks[0].result for x in runs if x.world_size == w), None)
    if not isinstance(results, list):
        raise Skip(f"your predictions for {w} ranks were not asked for (1.5 was graded at other world sizes)")
    predicted = dict(zip(cases(), results))
    problems = []
    for exercise_id, scheme in OWN.items():
        ran, problem = _own_measured(world, exercise_id)
        if problem:
            problems.append(f"{scheme} parallelism: your cell of {exercise_id} {problem}")
        if ran:
            problems += _disagreements(exercise_id, predicted.get((scheme, blocks, d, h, w, rows), {}), ran,
                                       expected(scheme, blocks, d, h, w, rows))
    if problems:
        return (f"one step of {blocks} blocks (d={d}, h={h}, {rows} rows) with your own code on {w} ranks:\n"
                + "\n".join(problems))
    if not world.complete and not any(r.of("own") for r in world.ranks):
        from autograder.diagnosis import summary

        return f"your cells of 1.1-1.4 stopped the launch before any of them ran: {summary(world)}"
    if not any(r.of("own_done") for r in world.ranks):
        raise Skip("your cells of exercises 1.1-1.4 are not done yet (they raise NotImplementedError): "
                   "once they are, this sets your predictions beside what your own code sends")
    return None


def _own_measured(world, exercise_id: str) -> tuple[dict | None, str | None]:
    """What the run of the student's cell of `exercise_id` measured on the busiest rank, or why there is nothing."""
    from autograder.diagnosis import summary

    def marked(kind):
        return [e for r in world.ranks for e in r.of(kind) if e.get("index") == exercise_id]

    if marked("own_failed"):
        return None, f"failed: {marked('own_failed')[0].get('error')}"
    if not marked("own") or marked("own_not_done"):
        return None, None  # no such cell, one still as released, or a run before it stopped the launch
    done = marked("own_done")
    if len(done) < len(world.ranks):
        return None, f"did not finish on every rank: {summary(world)}"
    sent, others = own_sent(world, exercise_id)
    held = [e.get("parameters") for e in done]
    held = [v for v in held if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return {"sent": sent, "parameters": max(held, default=0), "others": others}, None


def _disagreements(exercise_id: str, guess: dict, ran: dict, count: dict) -> list[str]:
    found = []
    for q in ("parameters", "sent"):
        if _close(guess.get(q), ran[q], RTOL[q]):
            continue
        shown = "nothing" if guess.get(q) is None else f"{guess[q]:g}"
        whose = ("you predicted the count; your code is what differs: its own check says how"
                 if _close(guess.get(q), count[q], RTOL[q]) else f"the count is {count[q]:g}")
        uncounted = (f"; it also called {', '.join(f'dist.{op}' for op in ran['others'])}, which is not counted here"
                     if q == "sent" and ran["others"] else "")
        found.append(f"{OWN[exercise_id]} parallelism, your cell of {exercise_id}: the busiest rank's {q!r} measured "
                     f"{ran[q]:g} bytes, you predicted {shown} ({whose}{uncounted})")
    return found


# The grader's count ---------------------------------------------------------------------------


def block_shapes(d: int, h: int) -> list[tuple[int, ...]]:
    """One MLP block's parameters: Linear(d, h) (weight, bias), then Linear(h, d)."""
    return [(h, d), (h,), (d, h), (d,)]


def shards(scheme: str, blocks: int, d: int, h: int, w: int, rank: int) -> list[tuple[int, ...]]:
    """The shapes of the parameters `rank` holds."""
    if scheme == "data":
        return block_shapes(d, h) * blocks
    if scheme == "pipeline":
        mine = len(torch.tensor_split(torch.arange(blocks), w)[rank])
        return block_shapes(d, h) * mine
    cols = h // w  # tensor: column-parallel Linear(d, h) and its bias; row-parallel Linear(h, d), its bias whole
    return [(cols, d), (cols,), (d, cols), (d,)] * blocks


def ring_sent(values: int, w: int, rank: int) -> int:
    """Bytes `rank` sends in a ring all-reduce of `values` floats cut with tensor_split (exercise 1.2)."""
    if w == 1:
        return 0
    chunks = [len(c) for c in torch.tensor_split(torch.arange(values), w)]
    sent = [chunks[(rank - s) % w] for s in range(w - 1)] + [chunks[(rank + 1 - s) % w] for s in range(w - 1)]
    return sum(sent) * FLOAT


def sent(scheme: str, blocks: int, d: int, h: int, w: int, rows: int, rank: int) -> int:
    if scheme == "data":
        return ring_sent(sum(math.prod(s) for s in block_shapes(d, h)) * blocks, w, rank)
    if scheme == "pipeline":  # every stage's output is rows x d, as is its input
        forward = rows * d * FLOAT if rank < w - 1 else 0
        backward = rows * d * FLOAT if rank > 0 else 0
        return forward + backward
    return blocks * 2 * ring_sent(rows * d, w, rank)  # per block: the output forward, the input's gradient back


def expected(scheme, blocks, d, h, w, rows) -> dict[str, int]:
    per_rank = []
    for rank in range(w):
        held = sum(math.prod(s) for s in shards(scheme, blocks, d, h, w, rank)) * FLOAT
        per_rank.append({"parameters": held, "gradients": held, "optimizer": 2 * held,
                         "sent": sent(scheme, blocks, d, h, w, rows, rank)})
    return {q: max(r[q] for r in per_rank) for q in QUANTITIES}


def _close(got, want, rtol: float = 1e-6) -> bool:
    return got is not None and abs(got - want) <= rtol * max(abs(want), 1)


def _judge(quantities: tuple[str, ...], schemes: tuple[str, ...], explain):
    def verify(runs):
        results = runs.worlds[0].ranks[0].result
        if not isinstance(results, list):
            return "per_rank_costs returned nothing that could be read"
        runs_at = {world.world_size: world for world in runs}
        answers = dict(zip(cases(), results))
        for case, got in answers.items():
            scheme, blocks, d, h, w, rows = case
            if scheme not in schemes:
                continue
            label = f"{scheme} parallelism, {blocks} blocks, d={d}, h={h}, W={w}, {rows} rows"
            if "error" in got:
                return f"{label}: per_rank_costs raised {got['error']}"
            want = expected(scheme, blocks, d, h, w, rows)
            data = answers.get(("data", blocks, d, h, w, rows), {})
            for q in quantities:
                if not any(_close(got.get(q), value, RTOL[q]) for value in _accepted(q, case, want, got, data)):
                    shown = "nothing (no number)" if got.get(q) is None else f"{got[q]:g}"
                    why = explain(q, got, want, scheme, blocks, d, h, w, rows)
                    whose = "twice its parameters'" if q == "optimizer" else "the busiest rank's"
                    seen = measured(runs_at[w], scheme) if (blocks, d, h, rows) == MEASURED and w in runs_at else None
                    ran = f" (a step run on {w} rank{'s' if w > 1 else ''} measured {seen[q]:g})" if seen else ""
                    return (f"{label}: {q!r} is {shown} bytes, {whose} is {want[q]:g}{ran}"
                            + (f": {why}" if why else ""))
    return verify


def _number(value) -> float | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _accepted(q: str, case: tuple, want: dict, got: dict, data: dict) -> list[float]:
    """The exact value, and the one that follows from the student's own earlier answer, so that one wrong count
    is charged once, where it is made: Adam's state from the parameters they counted, a data-parallel ring
    from the gradients they counted, tensor parallelism's all-reduces at the rate their data-parallel ring
    sends (a ring helper shared by both schemes is judged in the data check)."""
    scheme, blocks, d, h, w, rows = case
    values = [want[q]]
    if q == "optimizer" and _number(got.get("parameters")) is not None:
        values.append(2 * got["parameters"])
    if q == "sent" and scheme == "data" and _number(got.get("gradients")):
        values.append(2 * (w - 1) / w * got["gradients"])
    if q == "sent" and scheme == "tensor" and _number(data.get("sent")) is not None:
        gradients = _number(data.get("gradients")) or expected("data", blocks, d, h, w, rows)["gradients"]
        ring = 2 * (w - 1) / w
        if ring:
            values.append(want[q] * data["sent"] / (ring * gradients))
    return values


def _memory_explained(q, got, want, scheme, blocks, d, h, w, rows) -> str:
    value, whole = got.get(q), expected("data", blocks, d, h, 1, rows)[q]
    if value is None:
        return ""
    if q == "optimizer":
        if value == 0:
            return "Adam keeps two moments (exp_avg, exp_avg_sq) for every parameter it updates"
        if _close(value, want["optimizer"] / 2):
            return "that is one moment per parameter; Adam keeps two"
        return ""
    if scheme != "data" and w > 1 and _close(value, whole):
        return f"the whole model's; under {scheme} parallelism each rank holds only its share"
    if scheme == "pipeline" and _close(value, whole / w) and blocks % w:
        return (f"{blocks} blocks do not split evenly over {w} ranks: the busiest stage holds "
                f"{math.ceil(blocks / w)} of them")
    if scheme == "tensor" and _close(value, whole / w):
        return ("the second Linear's bias is not split: it is added after the all-reduce, so every rank holds "
                "it whole")
    return ""


def _sent_explained(q, got, want, scheme, blocks, d, h, w, rows) -> str:
    value = got.get(q)
    if value is None or w == 1:
        return "one rank sends nothing" if w == 1 and value else ""
    close = lambda a, b: _close(a, b, RTOL["sent"])  # noqa: E731
    n = sum(math.prod(s) for s in block_shapes(d, h)) * blocks * FLOAT
    if scheme == "data" and close(value, (w - 1) * n):
        return "that is what rank 0 sends when everything is gathered on it; a ring sends 2(W-1)/W of the gradients"
    if scheme == "data" and close(value, 2 * n):
        return "a ring rank sends 2(W-1) chunks of 1/W of the gradients each, not two whole copies"
    if scheme == "pipeline" and w == 2 and close(value, 2 * rows * d * FLOAT):
        return "with two stages, each rank sends in one direction only: rank 0 activations, rank 1 gradients"
    if scheme == "pipeline" and close(value, rows * d * FLOAT) and w > 2:
        return "a middle stage sends its activations forward and its input's gradient back, both for every row"
    if scheme == "tensor" and close(value, want[q] / 2):
        return "each block all-reduces twice per step: its output forward and its input's gradient backward"
    return ""


HINTS = {
    "memory": Hint(
        idea="What a rank holds depends on the scheme: the whole model under data parallelism, its own stage's "
             "blocks in a pipeline, a 1/W share of the split tensors under tensor parallelism; the number asked "
             "for is the busiest rank's.",
        section="7. Choosing",
        where="Look at the parameters and gradients of `per_rank_costs` for each scheme: the shapes of one "
              "block's two weights and two biases, how many blocks the busiest rank holds, and which tensors a "
              "tensor-parallel rank splits.",
        how="Add up the values of every tensor the busiest rank holds and multiply by the bytes of a float32; a "
            "pipeline's busiest stage has the most blocks when W does not divide them, a tensor-parallel rank "
            "keeps the second bias whole, and the gradients take as much as the parameters."),
    "optimizer": Hint(
        idea="Adam keeps two running averages, its moments, for every parameter a rank updates, each as large "
             "as the parameter.",
        section="1. Why split training at all",
        where="Look at the optimizer's number in `per_rank_costs`: it follows from your own count of the "
              "parameters the rank holds.",
        how="Count Adam's moments per parameter the rank updates, in float32 like the parameters, and leave its "
            "step counters out."),
    "data_sent": Hint(
        idea="Data parallelism sums the gradients with a ring all-reduce: each rank sends 2(W-1) chunks, each "
             "about 1/W of all the gradients.",
        section="4. How an all-reduce works",
        where="Look at the bytes sent in `per_rank_costs` for the data scheme: the size of all the gradients as "
              "one tensor, and the share of it that a ring rank sends.",
        how="Take the bytes of every gradient of the whole model and multiply by the number of chunks a rank "
            "sends in the ring's two phases and by the share of the tensor in one chunk; a single rank sends "
            "nothing."),
    "pipeline_sent": Hint(
        idea="A pipeline stage sends its output activations to the next stage and the gradient of its input to "
             "the previous one, for every row of the batch.",
        section="5. Pipeline parallelism",
        where="Look at the bytes sent in `per_rank_costs` for the pipeline: the shape of what crosses a stage "
              "boundary, and which ranks send in which direction.",
        how="For each rank count one tensor of every row at the blocks' width going forward unless it is the "
            "last stage, and one going back unless it is the first, in float32 bytes; then take the largest "
            "over the ranks."),
    "tensor_sent": Hint(
        idea="Under tensor parallelism every block all-reduces twice per step, its output going forward and its "
             "input's gradient going backward, each a ring all-reduce of a tensor shaped like the block's output.",
        section="6. Tensor parallelism",
        where="Look at the bytes sent in `per_rank_costs` for the tensor scheme: the size of one all-reduced "
              "tensor, how many all-reduces each block makes, and what a ring rank sends of one.",
        how="Multiply what a ring rank sends for one all-reduce of a tensor of every row at width d (counted as "
            "for data parallelism) by the number of all-reduces per block and by the number of blocks."),
    "own_code": Hint(
        idea="Your predictions beside what your own code of 1.1-1.4 held and sent in one step on 3 ranks; worth "
             "no points, each line says whether your prediction or your code is what differs.",
        section="7. Choosing",
        where="Depending on the line: your `per_rank_costs` for that scheme and quantity, or your cell of the "
              "exercise the line names.",
        how="Where the line says you predicted the count, your code is off: fix it in its own exercise, whose "
            "checks say how. Otherwise fix the prediction, guided by the checks above; a cell that failed or "
            "did not finish must first pass its own exercise."),
}


EXERCISE = Exercise(
    id="1.5",
    title="predict the costs per rank",
    kind="function", on_cpu=True,
    drawn_as="The course's own run (what your predictions are measured against)",
    entry="per_rank_costs",
    world_sizes=(1, 2, 3, 4),
    uses=tuple(OWN),
    # backward(grad) of a stage's output first imports it (and sympy): every rank would, each on its own
    warm_imports=("torch.fx.experimental.symbolic_shapes",),
    checks=[
        Check("parameters and gradients on the busiest rank, for data, pipeline and tensor parallelism", 3,
              _judge(("parameters", "gradients"), SCHEMES, _memory_explained), hint=HINTS["memory"]),
        Check("Adam's state on the busiest rank, for every scheme", 2,
              _judge(("optimizer",), SCHEMES, _memory_explained), hint=HINTS["optimizer"]),
        Check("bytes sent per step by the busiest rank: data parallelism (a ring all-reduce of the gradients)", 2,
              _judge(("sent",), ("data",), _sent_explained), hint=HINTS["data_sent"]),
        Check("bytes sent per step by the busiest rank: pipeline parallelism", 2,
              _judge(("sent",), ("pipeline",), _sent_explained), hint=HINTS["pipeline_sent"]),
        Check("bytes sent per step by the busiest rank: tensor parallelism", 2,
              _judge(("sent",), ("tensor",), _sent_explained), hint=HINTS["tensor_sent"]),
        # Worth nothing: a mistake in 1.1-1.4 is charged there. It shows the prediction beside the
        # student's own run, the lesson's "predict, then measure".
        Check("your predictions against your own 1.1-1.4 code, run on 3 ranks", 0, _own_code, needs="partial",
              hint=HINTS["own_code"]),
    ],
)
