"""Exercise 1.5: predict the costs: per_rank_costs(scheme, blocks, d, h, world_size, rows).

The student's function is pure arithmetic, called in a rank on several models and world sizes.
The grader counts the same quantities from what each rank would hold and send: the shapes of
every rank's shards (and Adam's two moments for each), and the messages of the schedules built
in exercises 1.2 to 1.4 (a ring all-reduce cut with tensor_split, GPipe's activations and
gradients, the Megatron MLP's two all-reduces per block). Each quantity is the busiest rank's.

Each launch also runs one training step of the first model under each scheme on its real ranks,
with the course's own ring all-reduce, pipeline and tensor-parallel MLP, and measures what each
rank holds (parameters, gradients, Adam's moments) and sends (the bytes of its traced messages). A
failed check shows those measurements beside the count; the tests prove the two equal. The step's
Adam is the course's (reference.Adam), which keeps the state torch.optim.Adam keeps: the tests
measure with torch's own, but in the graded ranks torch.optim would first import torch._dynamo.

Where the notebook holds the student's cells of 1.1-1.4, one more launch runs the same step with
their own code, and the last check (worth nothing: their mistakes there are charged in 1.1-1.4)
sets their predictions beside what their own code held and sent.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist

from autograder.checks import Check, Skip
from autograder.exercises import Exercise
from autograder.reference import Adam
from autograder.rig import join_group, number

FLOAT = 4  # bytes of a float32
SCHEMES = ("data", "pipeline", "tensor")
QUANTITIES = ("parameters", "gradients", "optimizer", "sent")
# (blocks, d, h, rows): h a multiple of every world size; blocks that some world sizes do not divide
MODELS = ((3, 16, 48, 32), (5, 8, 24, 12), (4, 32, 96, 7))
WORLD_SIZES = (1, 2, 3, 4)
# Memory is counted exactly; traffic within 1%, so that 2(W-1)/W of a length W does not divide
# counts as much as the exact chunks of tensor_split.
RTOL = {"parameters": 1e-6, "gradients": 1e-6, "optimizer": 1e-6, "sent": 1e-2}


def cases():
    for blocks, d, h, rows in MODELS:
        for w in WORLD_SIZES:
            for scheme in SCHEMES:
                yield scheme, blocks, d, h, w, rows


def harness(student, rank, layout, rec, companions=None, **_):
    join_group()
    if companions is not None:  # the launch of the student's own 1.1-1.4 cells (Exercise.uses)
        _own_runs(companions, rank, layout.world_size, rec)
        dist.barrier()
        dist.destroy_process_group()
        return None
    results = _predictions(student)
    for scheme in SCHEMES:
        rec.event("measure", index=scheme)
        held = _MEASURED_RUNS[scheme](rank, layout.world_size)
        rec.event("measured", index=scheme, **held)
    dist.barrier()  # leave together: see rig.join_group
    dist.destroy_process_group()
    return results


def _predictions(student) -> list[dict]:
    results = []
    for scheme, blocks, d, h, w, rows in cases():
        try:
            got = student.per_rank_costs(scheme, blocks, d, h, w, rows)
            results.append({q: number(got.get(q)) if isinstance(got, dict) else None for q in QUANTITIES})
        except NotImplementedError:
            raise  # the exercise cell as released: said as such
        except Exception as exc:
            results.append({"error": f"{type(exc).__name__}: {str(exc)[:200]}"})
    return results


# The measured runs: one step of MEASURED under each scheme, on the launch's ranks -------------

MEASURED = MODELS[0]


def ring_all_reduce(t: torch.Tensor) -> torch.Tensor:
    """Sum `t` over the ranks in place with point-to-point messages: reduce-scatter, then all-gather,
    chunks cut with tensor_split (exercise 1.2's algorithm)."""
    w, r = dist.get_world_size(), dist.get_rank()
    chunks = list(torch.tensor_split(t.view(-1), w))
    for s, reduce in [(s, True) for s in range(w - 1)] + [(s, False) for s in range(w - 1)]:
        out, into = ((r - s) % w, (r - s - 1) % w) if reduce else ((r + 1 - s) % w, (r - s) % w)
        incoming = torch.empty_like(chunks[into])
        request = dist.isend(chunks[out].clone(), (r + 1) % w)
        dist.recv(incoming, (r - 1) % w)
        request.wait()
        chunks[into].add_(incoming) if reduce else chunks[into].copy_(incoming)
    return t


def _model(blocks: int) -> torch.nn.Sequential:
    """`blocks` MLP blocks of MEASURED's widths: Linear(d, h), GELU, Linear(h, d) each."""
    _, d, h, _ = MEASURED
    return torch.nn.Sequential(*[layer for _ in range(blocks)
                                 for layer in (torch.nn.Linear(d, h), torch.nn.GELU(), torch.nn.Linear(h, d))])


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def _held(params: list[torch.Tensor], optimizer) -> dict[str, int]:
    """The bytes of parameters, gradients and Adam's two moments this rank holds, after a step."""
    optimizer.step()
    states = optimizer.state.values() if isinstance(optimizer.state, dict) else optimizer.state  # torch's, or ours
    moments = [t for state in states for k, t in state.items() if k in ("exp_avg", "exp_avg_sq")]
    return {"parameters": _bytes(params), "gradients": _bytes(p.grad for p in params if p.grad is not None),
            "optimizer": _bytes(moments)}


def _local_gradients(rank: int, w: int) -> torch.nn.Sequential:
    """The whole model, its gradients from this rank's share of the rows (data parallelism before averaging)."""
    blocks, d, _, rows = MEASURED
    model = _model(blocks)
    x = torch.tensor_split(torch.randn(rows, d, generator=torch.Generator().manual_seed(0)), w)[rank]
    model(x).square().mean().backward()
    return model


def _data_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    params = list(_local_gradients(rank, w).parameters())
    gradients = torch.cat([p.grad.flatten() for p in params])
    ring_all_reduce(gradients).div_(w)
    torch.nn.utils.vector_to_parameters(gradients, [p.grad for p in params])
    return _held(params, adam(params, lr=1e-3))


def _pipeline_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    blocks, d, h, rows = MEASURED
    stage = _model(len(torch.tensor_split(torch.arange(blocks), w)[rank]))
    x = torch.randn(rows, d, generator=torch.Generator().manual_seed(0))
    if rank > 0:
        dist.recv(x, rank - 1)
    x.requires_grad_()
    out = stage(x)
    if rank < w - 1:
        dist.send(out.detach(), rank + 1)
        grad = torch.empty(rows, d)
        dist.recv(grad, rank + 1)
        out.backward(grad)
    else:
        out.square().mean().backward()
    if rank > 0:
        dist.send(x.grad, rank - 1)
    params = list(stage.parameters())
    return _held(params, adam(params, lr=1e-3)) if params else {"parameters": 0, "gradients": 0, "optimizer": 0}


class _Copy(torch.autograd.Function):  # f: the input to every rank forward, its gradient all-reduced back
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return ring_all_reduce(grad.clone())


class _Sum(torch.autograd.Function):  # g: the partial outputs all-reduced forward, the gradient passed back
    @staticmethod
    def forward(ctx, x):
        return ring_all_reduce(x.clone())

    @staticmethod
    def backward(ctx, grad):
        return grad


def _tensor_step(rank: int, w: int, adam=Adam) -> dict[str, int]:
    blocks, d, h, rows = MEASURED
    cols = h // w
    params = []
    y = torch.randn(rows, d, generator=torch.Generator().manual_seed(0)).requires_grad_()
    for _ in range(blocks):
        a, a_bias = torch.randn(cols, d, requires_grad=True), torch.zeros(cols, requires_grad=True)
        b, b_bias = torch.randn(d, cols, requires_grad=True), torch.zeros(d, requires_grad=True)
        params += [a, a_bias, b, b_bias]
        y = _Sum.apply(torch.nn.functional.gelu(_Copy.apply(y) @ a.T + a_bias) @ b.T) + b_bias
    y.square().mean().backward()
    return _held(params, adam(params, lr=1e-3))


_MEASURED_RUNS = {"data": _data_step, "pipeline": _pipeline_step, "tensor": _tensor_step}


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


# The student's own code: one step of MEASURED with their 1.1-1.4 cells, where the notebook has them

OWN = {"1.1": "data", "1.2": "data", "1.3": "pipeline", "1.4": "tensor"}  # the exercise -> the scheme it runs


def _own_runs(companions: dict, rank: int, w: int, rec):
    """Each exercise whose cell came, in turn. A rank whose code raises stops there: the others would
    wait for it in their next message (the grader sees the deadlock), and the events say how far each got."""
    for exercise_id in OWN:
        cell = companions.get(exercise_id)
        if cell is None:
            continue
        if isinstance(cell, str):
            rec.event("own_failed", index=exercise_id, error=f"the cell could not be imported: {cell}")
            return
        rec.event("own", index=exercise_id)
        try:
            held = _OWN_STEPS[exercise_id](cell, rank, w)
        except NotImplementedError:  # the cell as released: every rank alike, so the next one can run
            rec.event("own_not_done", index=exercise_id)
            continue
        except Exception as exc:
            rec.event("own_failed", index=exercise_id, error=f"{type(exc).__name__}: {str(exc)[:200]}")
            return
        rec.event("own_done", index=exercise_id, parameters=held)


def _own_data_step(average_gradients, rank: int, w: int) -> int:
    """Data parallelism: this rank's gradients on its share of the rows, then `average_gradients(model)`."""
    model = _local_gradients(rank, w)
    average_gradients(model)
    return _bytes(model.parameters())


def _ring_of(cell):
    """1.2's ring_all_reduce used as 1.1's average_gradients: all the gradients as one tensor."""
    def average_gradients(model):
        params = list(model.parameters())
        gradients = torch.cat([p.grad.flatten() for p in params])
        cell.ring_all_reduce(gradients)
    return average_gradients


def _own_pipeline_step(cell, rank: int, w: int) -> int:
    blocks, d, h, rows = MEASURED
    stage = cell.stage_of(_model(blocks), rank, w)
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(rows, d, generator=g), torch.randn(rows, d, generator=g)
    cell.pipeline_step(stage, x, y, 2)
    return _bytes(stage.parameters())


def _own_tensor_step(cell, rank: int, w: int) -> int:
    """The student's MLP for each block. 1.4's has no biases; the bytes held count them as the model has
    them: the first Linear's split with its columns, the second's whole."""
    blocks, d, h, rows = MEASURED
    g = torch.Generator().manual_seed(0)
    y, held = torch.randn(rows, d, generator=g).requires_grad_(), 0
    for _ in range(blocks):
        a, b = (t.detach().clone().requires_grad_()
                for t in cell.shard_weights(torch.randn(d, h, generator=g), torch.randn(h, d, generator=g), rank, w))
        held += (a.numel() + b.numel() + h // w + d) * a.element_size()
        y = cell.tensor_parallel_mlp(y, a, b)
    y.square().mean().backward()
    return held


_OWN_STEPS = {"1.1": lambda cell, rank, w: _own_data_step(cell.average_gradients, rank, w),
              "1.2": lambda cell, rank, w: _own_data_step(_ring_of(cell), rank, w),
              "1.3": _own_pipeline_step, "1.4": _own_tensor_step}


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
    return {"sent": sent, "parameters": max(number(e.get("parameters")) or 0 for e in done), "others": others}, None


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
        for (scheme, blocks, d, h, w, rows), got in zip(cases(), results):
            if scheme not in schemes:
                continue
            label = f"{scheme} parallelism, {blocks} blocks, d={d}, h={h}, W={w}, {rows} rows"
            if "error" in got:
                return f"{label}: per_rank_costs raised {got['error']}"
            want = expected(scheme, blocks, d, h, w, rows)
            if quantities == ("optimizer",) and got.get("parameters") is not None:
                # Adam's state follows the parameters the student counted: a wrong count is charged once
                want = {**want, "optimizer": 2 * got["parameters"]}
            for q in quantities:
                if not _close(got.get(q), want[q], RTOL[q]):
                    shown = "nothing (no number)" if got.get(q) is None else f"{got[q]:g}"
                    why = explain(q, got, want, scheme, blocks, d, h, w, rows)
                    whose = "twice its parameters'" if q == "optimizer" else "the busiest rank's"
                    seen = measured(runs_at[w], scheme) if (blocks, d, h, rows) == MEASURED and w in runs_at else None
                    ran = f" (a step run on {w} rank{'s' if w > 1 else ''} measured {seen[q]:g})" if seen else ""
                    return (f"{label}: {q!r} is {shown} bytes, {whose} is {want[q]:g}{ran}"
                            + (f": {why}" if why else ""))
    return verify


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


EXERCISE = Exercise(
    id="1.5",
    title="predict the costs per rank",
    kind="function", on_cpu=True,
    entry="per_rank_costs",
    harness=harness,
    world_sizes=(1, 2, 3, 4),
    uses=tuple(OWN),
    # backward(grad) of a stage's output first imports it (and sympy): every rank would, each on its own
    warm_imports=("torch.fx.experimental.symbolic_shapes",),
    checks=[
        Check("parameters and gradients on the busiest rank, for data, pipeline and tensor parallelism", 3,
              _judge(("parameters", "gradients"), SCHEMES, _memory_explained),
              hint="count the shapes each rank holds: all blocks (data), its stage's blocks (pipeline), "
                   "1/W of each weight plus the whole row-parallel bias (tensor); 4 bytes a float"),
        Check("Adam's state on the busiest rank, for every scheme", 2,
              _judge(("optimizer",), SCHEMES, _memory_explained),
              hint="two float32 moments for every parameter the rank updates"),
        Check("bytes sent per step by the busiest rank: data parallelism (a ring all-reduce of the gradients)", 2,
              _judge(("sent",), ("data",), _sent_explained),
              hint="2(W-1) messages, each one chunk of about 1/W of all the gradients"),
        Check("bytes sent per step by the busiest rank: pipeline parallelism", 2,
              _judge(("sent",), ("pipeline",), _sent_explained),
              hint="a stage sends its output activations forward and its input's gradient back, for every row"),
        Check("bytes sent per step by the busiest rank: tensor parallelism", 2,
              _judge(("sent",), ("tensor",), _sent_explained),
              hint="two ring all-reduces of a rows x d tensor per block: one forward, one backward"),
        # Worth nothing: a mistake in 1.1-1.4 is charged there. It shows the prediction beside the
        # student's own run, the lesson's "predict, then measure".
        Check("your predictions against your own 1.1-1.4 code, run on 3 ranks", 0, _own_code, needs="partial",
              hint="where your code is what differs, the check of its own exercise says how; where your "
                   "prediction is, the checks above do"),
    ],
)
