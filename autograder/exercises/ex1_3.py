"""Exercise 1.3: a GPipe pipeline: stage_of(model, rank, world_size) and pipeline_step(stage, ...).

The model is a stack of layers of different widths, so the shape a stage receives depends on
where the cut is. stage_of is judged on its own; pipeline_step always runs on the grader's own
split, so a wrong split is charged once. Hooks on each stage's first and last layer record when
it computes each micro-batch forward and backward: the schedule, and the report's timeline.
"""

from __future__ import annotations

from collections import Counter

import torch
import torch.nn.functional as F

from autograder.checks import Check, scale_of
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex1_3 import MICRO_BATCHES, OTHER_DEPTHS, ROWS, WIDTHS, batch, bounds, make_layers

TOL = dict(rtol=1e-4, atol=1e-6)


def reference(seed: int, case: int) -> tuple[float, list[torch.Tensor]]:
    """The unsplit model's loss on the whole batch, and its gradients flattened layer by layer."""
    model = make_layers(seed)
    x, y = batch(seed, case)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    return loss.item(), [torch.cat([p.grad.flatten() for p in layer.parameters()]) for layer in model]


def _span(layers: list[int]) -> str:
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"


def _stages_split_the_model(runs):
    """Judged on the exercise's model and on stacks of other depths, each split by the student's stage_of."""
    for world in runs:
        for index, n in enumerate((len(WIDTHS) - 1, *OTHER_DEPTHS)):
            held, problem = _stages_held(world, index)
            if problem or held is None:
                return problem
            problem = _split_problem(held, world.world_size, n)
            if problem:
                return f"world size {world.world_size}, a model of {n} layers: {problem}"


def _stages_held(world, index: int) -> tuple[dict[int, list[int]] | None, str | None]:
    """The layers each rank's stage held, for the `index`-th model stage_of was given; None if a rank never got there."""
    held = {}
    for r in world.ranks:
        records = r.of("stage")
        if len(records) <= index:
            return None, None  # a rank that never got this far: told as a crash
        if records[index].get("error"):
            return None, f"{world.label}: on rank {r.rank}, stage_of raised {records[index]['error']}"
        held[r.rank] = [k for k in records[index].get("layers", []) if isinstance(k, int)]
    return held, None


def _split_problem(held: dict[int, list[int]], w: int, n: int) -> str | None:
    for rank, layers in held.items():
        if not layers:
            return f"rank {rank}'s stage holds none of the model's layers"
        if w > 1 and len(layers) == n:
            return (f"rank {rank} holds all {n} layers: a pipeline rank keeps only its own stage "
                    "(and its parameters), a slice of the model")
        if layers != list(range(layers[0], layers[0] + len(layers))):
            return (f"rank {rank} holds layers {layers}: a stage is a run of consecutive "
                    "layers, so that each stage's output is the next stage's input")
    owners = Counter(k for layers in held.values() for k in layers)
    repeated = [k for k in range(n) if owners[k] > 1]
    if repeated:
        return (f"layer {repeated[0]} is on ranks "
                f"{[r for r, layers in held.items() if repeated[0] in layers]}: each layer belongs to one stage")
    missing = [k for k in range(n) if owners[k] == 0]
    if missing:
        return (f"{len(missing)} layer(s) on no rank ({_span(missing)} of {n}): when the world "
                f"size does not divide the {n} layers, some stages take one more")
    order = sorted(held, key=lambda r: held[r][0])
    if order != sorted(held):
        return (", ".join(f"rank {r} holds {_span(held[r])}" for r in sorted(held))
                + ": stage r must come before stage r + 1, as activations flow from rank 0 to the last rank")
    sizes = [len(held[r]) for r in sorted(held)]
    if max(sizes) - min(sizes) > 1:
        return (f"stages of {', '.join(map(str, sizes))} layers: make them as even as possible "
                "(sizes differ by at most one), or the slowest stage sets the pace of all")
    return None


def _loss_of_the_whole_batch(runs):
    seed = runs.params["seed"]
    for world in runs:
        last = world.ranks[-1]
        losses = last.result.get("losses", []) if isinstance(last.result, dict) else []
        for case, micro in enumerate(MICRO_BATCHES):
            want, _ = reference(seed, case)
            got = losses[case] if case < len(losses) else None
            label = f"{world.label}, {micro} micro-batches"
            if got is None:
                return (f"{label}: the last rank (rank {last.rank}) returned no number; it returns the loss of the "
                        "whole batch (a float or a one-element tensor)")
            if abs(got - want) <= 1e-4 * abs(want) + 1e-6:
                continue
            if abs(got - micro * want) <= 1e-4 * abs(micro * want) + 1e-6:
                return (f"{label}: the last rank returned {got:.6g}, {micro} times the loss of the whole batch "
                        f"({want:.6g}): the sum of the micro-batches' mean losses; the batch's mean loss is their "
                        "mean")
            if abs(got * micro - want) <= 1e-4 * abs(want) + 1e-6:
                return (f"{label}: the last rank returned {got:.6g}, 1/{micro} of the loss of the whole batch "
                        f"({want:.6g}): divided by the number of micro-batches twice (the mean of losses already "
                        "divided by it for the backward pass); the batch's loss is the mean of the micro-batches' "
                        "mean losses")
            return f"{label}: the last rank returned {got:.6g}; the loss of the whole batch is {want:.6g}"


def _received_without_grad(runs):
    for world in runs:
        for r in world.ranks[1:]:
            event = next((e for e in r.of("forward") if e.get("needs_grad") is False), None)
            if event is not None:
                return (f"{world.label}: rank {r.rank}'s stage ran on activations that do not "
                        "require grad, so backward never computes their gradient to send back to rank "
                        f"{r.rank - 1}: call requires_grad_() on the tensor you receive")


def _gradients_of_every_stage(runs):
    problem = _received_without_grad(runs)
    if problem or not runs.complete:
        return problem
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        for case, micro in enumerate(MICRO_BATCHES):
            _, grads = reference(seed, case)
            label = f"world size {w}, {micro} micro-batches"
            for r in reversed(world.ranks):  # the first wrong stage, counting from the loss
                want = torch.cat([grads[k] for k in bounds(w)[r.rank]]).double()
                got = r.kept(f"gradients, step {case}")
                if got is None:
                    return f"{label}: rank {r.rank}'s gradients were not recorded"
                if got.shape == want.shape and torch.allclose(got, want, **TOL):
                    continue
                return f"{label}: rank {r.rank}'s stage ({_span(list(bounds(w)[r.rank]))}): " + \
                    _what_the_gradients_are(got, want, micro, r.rank, w)


def _what_the_gradients_are(got, want, micro, rank, w) -> str:
    if torch.isnan(got).all():
        if rank < w - 1:
            return (f"no gradients: its backward never ran; it must receive the gradient of its output from "
                    f"rank {rank + 1} and call output.backward(that gradient)")
        return "no gradients: the backward pass from the loss never ran"
    k = scale_of(got, want)
    if k is not None and micro > 1 and abs(k - micro) < 1e-3 * micro:
        return (f"gradients {micro} times the unsplit model's: divide each micro-batch's loss by the number of "
                f"micro-batches ({micro}), so that their gradients add up to those of the batch's mean loss")
    if k is not None and micro > 1 and abs(k * micro - 1) < 1e-3:
        return f"gradients 1/{micro} of the unsplit model's: divided by the number of micro-batches twice"
    if k is not None:
        return (f"gradients {k:.4g} times the unsplit model's: the loss was scaled by {k:.4g} somewhere; each "
                "micro-batch's mean loss is divided by the number of micro-batches, and by nothing else")
    gap = (got - want).abs().nan_to_num(float("inf")).max().item()
    cause = ("" if rank == w - 1 else
             f"; the stages after it are right, so the gradient it received from rank {rank + 1}, or how it used "
             "it, is not the gradient of its own output")
    return f"gradients differ from the unsplit model's by up to {gap:.3g}{cause}"


def expected_messages(rank: int, w: int, micro: int) -> Counter:
    rows = [len(part) for part in torch.arange(ROWS).tensor_split(micro)]
    layers = bounds(w)[rank]
    want = Counter()
    for n in rows:
        if rank < w - 1:  # activations forward, their gradients back
            size = n * WIDTHS[layers.stop] * 4
            want += Counter({("send", rank + 1, size): 1, ("recv", rank + 1, size): 1})
        if rank > 0:
            size = n * WIDTHS[layers.start] * 4
            want += Counter({("recv", rank - 1, size): 1, ("send", rank - 1, size): 1})
    return want


def _gpipe_schedule(runs):
    for world in sorted(runs, key=lambda w: -w.world_size):
        w = world.world_size
        for r in world.ranks:
            for case, events in sorted(r.windows("case", "case_done").items()):
                micro = MICRO_BATCHES[case]
                problem = _messages_differ(Counter(m[:3] for m in r.messages(events)), expected_messages(r.rank, w, micro), r.rank, micro)
                if problem:
                    return f"world size {w}, {micro} micro-batches: {problem}"
                kinds = [e["kind"] for e in events if e.get("kind") in ("forward", "backward")]
                if "backward" in kinds and "forward" in kinds[kinds.index("backward"):]:
                    return (f"world size {w}, {micro} micro-batches: rank {r.rank} started a backward pass before "
                            f"its last forward pass; GPipe runs the forwards of all {micro} micro-batches, then "
                            "their backwards (interleaving them is another schedule, 1F1B)")


def _messages_differ(got: Counter, want: Counter, rank: int, micro: int) -> str | None:
    if got == want:
        return None
    pairs = {(d, p) for d, p, _ in list(got) + list(want)}
    for direction, peer in sorted(pairs, key=lambda pair: (pair[0] != "send", str(pair[1]))):
        mine = sorted(size for (d, p, size), n in got.items() for _ in range(n) if (d, p) == (direction, peer))
        ideal = sorted(size for (d, p, size), n in want.items() for _ in range(n) if (d, p) == (direction, peer))
        if mine == ideal:
            continue
        verb, way = ("sent", "to") if direction == "send" else ("received", "from")
        what = ("activations" if (direction == "send") == (isinstance(peer, int) and peer > rank) else "gradients")
        if not ideal:
            who = "any rank" if peer is None else f"rank {peer}"
            return (f"rank {rank} {verb} {len(mine)} message(s) {way} {who}, which is not one of its neighbours in "
                    "the pipeline; a stage talks only to the stages before and after it")
        seen = (f"{len(mine)} message(s) ({', '.join(map(str, mine[:6]))}{', ...' if len(mine) > 6 else ''} bytes)"
                if mine else "no message")
        return (f"rank {rank} {verb} {seen} {way} rank {peer}; the schedule has {len(ideal)}, one micro-batch's "
                f"{what} each ({', '.join(map(str, ideal))} bytes)")
    return None


def _work(runs):
    if not any(w.world_size > 1 for w in runs):
        return None  # one stage sends nothing: no sign either way
    if not any(r.messages() for w in runs if w.world_size > 1 for r in w.ranks):
        return "no rank sent or received a message: the stages pass activations and gradients with send and recv"


HINTS = {
    "stages": Hint(
        idea="A pipeline stage is a run of consecutive layers: rank 0 takes the first ones, every layer belongs "
             "to exactly one rank, and the stages' sizes differ by at most one layer.",
        section="5. Pipeline parallelism",
        where="Look at `stage_of`: how it computes the first and the last layer of this rank's share, above all "
              "when the world size does not divide the number of layers.",
        how="Compute the boundaries of W nearly equal runs of layer indices, handing the leftover layers out one "
            "per rank, with the same arithmetic on every rank, and return the slice of the model between this "
            "rank's boundaries."),
    "loss": Hint(
        idea="The last rank returns the mean squared error of the whole batch: the number `one_process_step` "
             "returns.",
        section="5. Pipeline parallelism",
        where="Look at the end of `pipeline_step` on the last rank: how it adds up the micro-batches' losses, and "
              "whether it divides by the number of micro-batches once, twice or not at all.",
        how="Return the loss of the whole batch: each micro-batch's mean loss divided by the number of "
            "micro-batches once, added up (or each weighted by its share of the rows), as a float or a "
            "one-element tensor."),
    "gradients": Hint(
        idea="Every stage ends the step with the gradients the unsplit model gets on the whole batch. Autograd "
             "stops at the edge of a process, so each stage starts its backward pass from the gradient it "
             "receives and sends back the gradient of its input.",
        section="5. Pipeline parallelism",
        where="Look at `pipeline_step`: whether the activations a stage receives require grad, how a stage "
              "before the last starts its backward pass, and how the last stage scales each micro-batch's loss.",
        how="Mark each received activation as requiring grad so that backward computes its gradient; start a "
            "stage's backward from its output with the gradient received from the next rank, and send its "
            "input's gradient to the previous rank; divide each micro-batch's loss by the number of "
            "micro-batches exactly once."),
    "schedule": Hint(
        idea="GPipe's schedule: each micro-batch's activations go forward and their gradients come back, one "
             "message each, between neighbouring stages only, and all forward passes run before the first "
             "backward pass.",
        section="5. Pipeline parallelism",
        where="Look at the loops of `pipeline_step`: to or from which rank each send and receive goes, how many "
              "there are per micro-batch, and whether a backward pass starts inside the loop of forward passes.",
        how="Run the forward passes of all micro-batches first, each sending its output to the next rank only, "
            "then their backward passes, each sending its input's gradient to the previous rank only: one "
            "message per micro-batch and direction, of that micro-batch's rows, and nothing else.",
        lines_of=("enter",)),
}


EXERCISE = Exercise(
    id="1.3",
    title="a GPipe pipeline",
    kind="function", on_cpu=True,
    entry="pipeline_step",
    params=lambda seed: {"seed": seed},
    work=_work,
    timeline_between=("case", "case_done"),  # the last step
    # output.backward(gradient) imports sympy (through symbolic shapes) on first use: half a second per rank
    warm_imports=("torch.fx.experimental.symbolic_shapes",),
    checks=[
        Check("stage_of: consecutive layers per rank, each layer on exactly one rank, as even as possible", 2,
              _stages_split_the_model, needs="partial", hint=HINTS["stages"]),
        Check("the last rank returns the loss of the whole batch, equal to the unsplit model's", 2,
              _loss_of_the_whole_batch, hint=HINTS["loss"]),
        Check("every stage's gradients equal the unsplit model's on the whole batch", 4,
              _gradients_of_every_stage, needs="partial", hint=HINTS["gradients"]),
        Check("messages follow GPipe: each micro-batch's activations forward and gradients back, between "
              "neighbours, all forwards before the backwards", 3, _gpipe_schedule, hint=HINTS["schedule"]),
    ],
)
