"""Exercise 2.6: DDP's overlap, built by hand: BucketedDataParallel(module, bucket_numel).

Each step the harness runs forward through the wrapper, backward, then the wrapper's
finish_gradient_synchronization, and steps plain SGD itself. It records when each parameter's
gradient is ready, among the all-reduces the wrapper starts and the waits for them, so what the
checks observe is the schedule itself: which gradients went out together, whether they went out
while backward was still computing, and whether their results were waited for before the step.
Gradients are judged step by step from the parameters each rank held, as in 1.1, so a wrong
broadcast is not charged again as wrong gradients.
"""

from __future__ import annotations

import functools

import torch

from autograder.checks import Check, every_rank_calls_the_same_collectives, how_a_gradient_differs
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import averaged_gradients, flat, off_the_mean, parameter_blocks
from ddpcourse.given.ex2_6 import BUCKET_NUMEL, STEPS, make_deep_model, shard, start_seed

TOL = dict(rtol=1e-4, atol=1e-6)
STILL_LOCAL = "the all-reduced bucket was not copied back into the parameters' .grad"
NUMELS = [p.numel() for p in make_deep_model(0).parameters()]
RULE = ("parameters from the last back, each bucket taking the next parameter unless that would take it over "
        "bucket_numel (or, as DDP does, closing once it holds bucket_numel or more)")


def buckets(numels: list[int], cap: int, closes_at_cap: bool = False) -> list[list[int]]:
    """Parameter indices bucket by bucket, in the order their gradients become ready (last parameter first).

    A bucket takes the next parameter unless that would take it over ``cap`` elements (a parameter larger
    than ``cap`` has a bucket of its own); with ``closes_at_cap``, as DDP fills them, a bucket closes as
    soon as it holds ``cap`` elements or more.
    """
    found, bucket, size = [], [], 0
    for index in reversed(range(len(numels))):
        if bucket and not closes_at_cap and size + numels[index] > cap:
            found.append(bucket)
            bucket, size = [], 0
        bucket.append(index)
        size += numels[index]
        if closes_at_cap and size >= cap:
            found.append(bucket)
            bucket, size = [], 0
    return found + ([bucket] if bucket else [])


def _sizes(partition: list[list[int]]) -> list[int]:
    return [sum(NUMELS[i] for i in bucket) for bucket in partition]


def _accepted(cap: int) -> list[list[list[int]]]:
    return [buckets(NUMELS, cap), buckets(NUMELS, cap, closes_at_cap=True)]


class Step:
    """What one rank did in one training step: from the start of backward to the optimizer step."""

    def __init__(self, events: list[dict], step: int):
        marks = {e["phase"]: k for k, e in enumerate(events) if e.get("kind") == "phase" and e.get("step") == step}
        start, finish, end = (marks.get(p) for p in ("backward", "finish_gradient_synchronization", "step"))
        self.seen = None not in (start, finish, end)
        self.events = events[start:end] if self.seen else []
        self.finish = finish - start if self.seen else 0  # where backward() returned, among self.events
        # the all-reduces the student's code started, with where they stand among the events
        self.reduces = [(k, e) for k, e in enumerate(self.events)
                        if e.get("kind") == "enter" and e.get("call") == "all_reduce" and e.get("caller")]
        self.ready = [k for k, e in enumerate(self.events) if e.get("kind") == "gradient_ready"]
        self.waited = {e.get("n"): k for k, e in enumerate(self.events)
                       if e.get("kind") == "waited" and e.get("op") == "all_reduce"}

    def sizes(self) -> list[int]:
        return [_numel(e) for _, e in self.reduces]

    def unwaited(self) -> list[dict]:
        return [e for _, e in self.reduces if e.get("async_op") and e.get("n") not in self.waited]


def _numel(event: dict) -> int:
    shape = event.get("shape") or []
    return int(torch.tensor(shape).prod().item()) if shape else 0


def _steps(world):
    """(rank, step number, Step) for every rank and step that ran to its optimizer step."""
    for r in world.ranks:
        for step in range(STEPS):
            seen = Step(r.events, step)
            if seen.seen:
                yield r, step, seen


def _same_weights_as_rank_0(runs):
    for world in runs:
        starts = [flat(make_deep_model(start_seed(runs.params["seed"], rank))) for rank in range(world.world_size)]
        for r in world.ranks:
            got = r.kept("after construction")
            if got is None:
                return f"{world.label}: rank {r.rank}'s parameters were not recorded after construction"
            if torch.allclose(got, starts[0], **TOL):
                continue
            owner = next((k for k, s in enumerate(starts) if torch.allclose(got, s, **TOL)), None)
            if owner is not None:
                return (f"{world.label}: after BucketedDataParallel(...) rank {r.rank} holds rank {owner}'s initial "
                        "weights, not rank 0's: every rank must start from the same model")
            return (f"{world.label}: after BucketedDataParallel(...) rank {r.rank}'s parameters are neither its "
                    "own initial weights nor rank 0's")


def _one_all_reduce_per_bucket(runs):
    for world in runs:
        cap = BUCKET_NUMEL[world.world_size]
        for r, step, seen in _steps(world):
            got = seen.sizes()
            if got in [_sizes(p) for p in _accepted(cap)]:
                continue
            return (f"{world.label}, step {step}: rank {r.rank} all-reduced {_listed(got)} elements; "
                    f"{_why_these_buckets(got, cap)}")


def _why_these_buckets(got: list[int], cap: int) -> str:
    want = " or ".join(_listed(_sizes(p)) for p in _accepted(cap))
    expected = f"with bucket_numel={cap} the buckets are {want} ({RULE})"
    if not got:
        return "no all-reduce between backward() and the step: the gradients were not exchanged"
    if sorted(got) == sorted(NUMELS):
        return f"one all-reduce per parameter is no bucketing: {expected}"
    if sum(got) == sum(NUMELS) and len(got) == 1:
        return f"one all-reduce of every gradient: bucket_numel was not used; {expected}"
    in_forward_order = NUMELS[::-1]  # buckets() fills from the end of the list it is given
    forward_sizes = [[sum(in_forward_order[i] for i in bucket) for bucket in buckets(in_forward_order, cap, rule)][::-1]
                     for rule in (False, True)]  # started in the order they complete: the last one first
    if got in forward_sizes:
        return ("these are buckets filled in forward order, from the first parameter: backward produces the "
                f"last layer's gradients first, so the first bucket would wait for the whole backward; {expected}")
    return expected


def _listed(sizes: list[int]) -> str:
    return "[" + ", ".join(map(str, sizes)) + "]"


def _overlaps_backward(runs):
    for world in runs:
        for r, step, seen in _steps(world):
            problem = _overlap_problem(seen)
            if problem:
                return f"{world.label}, step {step}: rank {r.rank} {problem}"


def _overlap_problem(seen: Step) -> str | None:
    during = [(k, e) for k, e in seen.reduces if k < seen.finish]
    if not during:  # every launch has several buckets, so all but the last have something to overlap
        if seen.reduces:
            return ("started no all-reduce while backward() ran: they all began after backward() returned, so "
                    "nothing overlapped the computation (start each bucket from a hook on its last gradient)")
        return None  # nothing exchanged at all: the check of one all-reduce per bucket names that mistake
    for k, e in during[:-1]:  # the last bucket has nothing left to overlap
        later = [g for g in seen.ready if g > k]
        if not later:
            return (f"started all_reduce #{e['n']} only when every gradient was ready: a bucket must go out as "
                    "soon as its own gradients are ready, while backward() computes the rest")
        if not e.get("async_op"):
            return (f"called all_reduce #{e['n']} without async_op=True during backward(): the call returns only "
                    "once the all-reduce is done, so backward() stood still while it ran")
        waited = seen.waited.get(e["n"])
        if waited is not None and waited < later[0]:
            return (f"waited for all_reduce #{e['n']} as soon as it started, before backward() computed another "
                    "gradient: keep the handle and wait in finish_gradient_synchronization")
    return None


def _every_all_reduce_waited(runs):
    for world in runs:
        for r, step, seen in _steps(world):
            missing = seen.unwaited()
            if missing:
                return (f"{world.label}, step {step}: rank {r.rank} never waited for all_reduce #{missing[0]['n']} "
                        f"(of {_numel(missing[0])} elements) before the optimizer step: an asynchronous all-reduce "
                        "may not have finished when its result is read (wait() on each handle in "
                        "finish_gradient_synchronization)")


def _gradients_averaged(runs):
    seed = runs.params["seed"]
    blocks = parameter_blocks(make_deep_model(0))
    judged = 0
    for world in runs:
        w = world.world_size
        for step in range(STEPS):
            before = "after construction" if step == 0 else f"parameters after step {step - 1}"
            found = averaged_gradients(world, step, before, lambda: make_deep_model(0), functools.partial(shard, seed))
            if found is None:
                return f"{world.label}: the gradients of step {step} were not recorded on every rank"
            got, local = found
            off = off_the_mean(got, local, blocks, **TOL)
            if off and _charged_elsewhere(world, step):
                continue
            judged += 1
            if off:
                r, name, part, mean = off
                return (f"{world.label}, step {step}: after finish_gradient_synchronization rank {r}'s gradient of "
                        f"{name} {how_a_gradient_differs(got[r][part], mean[part], local[r][part], w, STILL_LOCAL)}")
    if not judged and not any(_charged_elsewhere(world, step) for world in runs for step in range(STEPS)):
        return "no step's gradients could be judged"


def _charged_elsewhere(world, step: int) -> bool:
    """Whether gradients off the mean at this step have a cause another check names: a rank started no all-reduce
    in it (the check of one all-reduce per bucket), or read a bucket before its all-reduce was waited for (the
    check of the waits). Such a step is not judged here; the same mistake is charged once."""
    steps = [Step(r.events, step) for r in world.ranks]
    return any(not s.reduces or s.unwaited() for s in steps)


def _work(runs):
    if not any(e.get("caller") for w in runs for r in w.ranks for e in r.of("collective")):
        return "no rank called a collective: BucketedDataParallel does not exchange anything yet"


EXERCISE = Exercise(
    id="2.6",
    title="DDP's overlap, built by hand: gradient buckets all-reduced during backward",
    kind="function", on_cpu=True,
    entry="BucketedDataParallel",
    params=lambda seed: {"seed": seed},
    work=_work,
    checks=[
        Check("after construction every rank holds rank 0's weights", 2, _same_weights_as_rank_0, hint=Hint(
            idea="The ranks build their models from different seeds; as DDP does when it wraps a model, your wrapper "
                 "must give every rank rank 0's weights before any training.",
            section="5. Wrapping the model in DDP",
            where="Your wrapper's constructor: what it sends from rank 0 to the other ranks, and whether what they "
                  "receive ends up in the module's own parameters.",
            how="In the constructor, on every rank, broadcast the parameters from rank 0, one by one or flattened "
                "together, and make sure the received values are written back into the module's parameters.",
            lines_of=("collective",))),
        Check("after finish_gradient_synchronization every gradient is the mean over the ranks", 6,
              _gradients_averaged, hint=Hint(
                  idea="After finish_gradient_synchronization every parameter's gradient must hold the mean over the "
                       "ranks: an all-reduce only sums, and its result sits in the flattened bucket until it is "
                       "copied back.",
                  section="5. Wrapping the model in DDP",
                  where="Your finish_gradient_synchronization: what happens to each bucket's reduced tensor, where "
                        "the division by the world size happens, and how the result reaches each parameter's "
                        "gradient.",
                  how="Divide by the world size exactly once, before the all-reduce or after it, and once a bucket's "
                      "all-reduce has completed, copy its pieces back into the gradients of its parameters, in the "
                      "order they were flattened.")),
        Check("one all-reduce per bucket, the buckets filled from the last parameter back up to bucket_numel", 5,
              _one_all_reduce_per_bucket, hint=Hint(
                  idea="Buckets group the gradients in the order backward produces them, from the last parameter "
                       "back, each up to bucket_numel elements: one all-reduce per bucket, neither one per parameter "
                       "nor one for everything.",
                  section="Communication overlaps the backward pass: buckets",
                  where="The part of your constructor that groups the parameters into buckets, and how many "
                        "all-reduces each bucket gets in a step.",
                  how="Walk the parameters from the last back to the first, closing a bucket when the next one would "
                      "take it past bucket_numel (or, as DDP does, once it holds bucket_numel or more), and start "
                      "exactly one all-reduce per bucket, on its gradients flattened together.",
                  lines_of=("collective",))),
        Check("each bucket's all-reduce starts during backward, as soon as its gradients are ready, "
              "and runs while backward goes on", 6, _overlaps_backward, hint=Hint(
                  idea="Overlap means a bucket's all-reduce runs while backward still computes the earlier layers: "
                       "it starts the moment the bucket's last gradient is ready, returns at once, and is waited for "
                       "only later.",
                  section="Communication overlaps the backward pass: buckets",
                  where="The hooks your wrapper registers on the parameters: when they find a bucket complete, how "
                        "they start its all-reduce, and where your code waits for it.",
                  how="Let a hook on each parameter (a post-accumulate-grad hook, or a hook on its gradient) notice "
                      "when its bucket's last gradient is ready, start that bucket's all-reduce right there with "
                      "async_op on, keep the handle, and wait on it only in finish_gradient_synchronization.",
                  lines_of=("enter",))),
        Check("every all-reduce is waited for before finish_gradient_synchronization returns", 3,
              _every_all_reduce_waited, hint=Hint(
                  idea="An asynchronous all-reduce's result is there only once its handle has been waited for; "
                       "before that, the bucket may still hold a sum in progress.",
                  section="Communication overlaps the backward pass: buckets",
                  where="Your finish_gradient_synchronization: whether it waits for every bucket started during this "
                        "step's backward, the last one included.",
                  how="Keep every handle (or its future) that the hooks start, wait on each one in "
                      "finish_gradient_synchronization before using its result, then clear them for the next step.",
                  lines_of=("enter",))),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 1,
              every_rank_calls_the_same_collectives, needs="partial", hint=Hint(
                  idea="A collective completes only when every rank calls it, in the same order: a broadcast or "
                       "all-reduce that only some ranks reach leaves the others waiting, or pairs up wrong.",
                  section="10. Break it: ranks that disagree",
                  where="Every broadcast and all-reduce in your wrapper, and any test of the rank around them.",
                  how="Call each collective on all ranks, the broadcast in the constructor too: rank 0 differs only as "
                      "the broadcast's source, not by calling it alone.",
                  lines_of=("collective",))),
    ],
)
