"""Exercise 2.3: global evaluation. Every sample counts once; every rank gets the global accuracy."""

from __future__ import annotations

import numbers
from collections import Counter

from autograder.checks import Check, each_rank, every_rank_calls_the_same_collectives, shares_disjoint_and_covering
from autograder.exercises import Exercise
from autograder.reference import correct_predictions
from ddpcourse import make_model, toy_dataset
from ddpcourse.given.ex2_3 import N


def expected(seed: int) -> dict:
    """Computed by the grader once the ranks have ended; never handed to them."""
    return {"correct": correct_predictions(make_model(seed + 1), toy_dataset(n=N, seed=seed))}


def _work(runs):
    if not any(r.of("scored") for w in runs for r in w.ranks):
        return "the model was never run on any sample"


def _returns_a_number(runs):
    for world, r in each_rank(runs):
        if not isinstance(r.result, numbers.Real):
            return f"{world.label}: rank {r.rank} returned {r.result}, not a number"


def _same_on_every_rank(runs):
    for world in runs:
        values = [r.result for r in world.ranks]
        if len(set(values)) > 1:
            return f"{world.label}: the ranks returned different accuracies {values}"


def _each_sample_once(runs):
    for world in runs:
        shares = {r.rank: [i for e in r.of("scored") for i in e["indices"]] for r in world.ranks}
        label = f"{world.label}"
        duplicated = [i for i, c in Counter(i for s in shares.values() for i in s).items() if c > 1]
        message = shares_disjoint_and_covering(shares, N, world.world_size, label)
        if message and duplicated and not all(len(set(s)) == N for s in shares.values()):
            message += ("; repeats like these are DistributedSampler's padding, which reuses samples so that "
                        "every rank gets the same number")
        if message:
            return message


def _each_rank_scores_its_share(runs):
    for world in runs:
        shares = {r.rank: {i for e in r.of("scored") for i in e["indices"]} for r in world.ranks}
        if world.world_size == 1 or sum(map(len, shares.values())) != len(set().union(*shares.values())):
            continue  # samples on several ranks: the check of each sample once names that mistake
        fair = -(-N // world.world_size)
        for rank, share in shares.items():
            if not share or len(share) > 2 * fair:
                return (f"{world.label}: rank {rank} scored {len(share)} of the {N} samples, "
                        f"where a fair share is about {fair}: the ranks did not split the work")


def _equals_single_process(runs):
    """Rank 0's value against the accuracy over the samples the ranks actually scored.

    Scored twice (padding) or never, a sample is charged by the check of each sample once; returned
    uncombined by rank 0 where the ranks did combine their counts, by the check of the same accuracy on
    every rank; where no rank exchanged anything, rank 0's own accuracy is no global one, and fails here.
    """
    correct = runs.params["correct"]
    for world in runs:
        scored = {r.rank: [i for e in r.of("scored") for i in e["indices"] if 0 <= i < N] for r in world.ranks}
        everywhere = [i for share in scored.values() for i in share] or range(N)
        want = sum(correct[i] for i in everywhere) / len(everywhere)
        accepted = [want]
        combined = any(e.get("caller") for r in world.ranks for e in r.of("collective"))
        if len({r.result for r in world.ranks}) > 1 and scored[0] and combined:
            # the counts were combined, but rank 0 returned its own: charged by the check of the same accuracy
            accepted.append(sum(correct[i] for i in scored[0]) / len(scored[0]))
        got = world.ranks[0].result
        # float32 counts are fine; an average of per-rank accuracies is not
        if not isinstance(got, numbers.Real) or not any(abs(got - a) <= 1e-6 for a in accepted):
            shown = f"{got:.6f}" if isinstance(got, numbers.Real) else str(got)[:60]
            return (f"{world.label}: rank 0 returned {shown}, but the model's accuracy over "
                    f"the {len(everywhere)} samples the ranks scored is {want:.6f}")


EXERCISE = Exercise(
    id="2.3",
    title="global evaluation",
    kind="function",
    entry="evaluate",
    params=lambda seed: {"seed": seed},
    expected=expected,
    work=_work,
    checks=[
        Check("returns a number on every rank", 1, _returns_a_number,
              hint="return correct / total as a Python float (tensor.item())"),
        Check("every rank returns the same accuracy", 2, _same_on_every_rank,
              hint="combine the counts with dist.all_reduce so that every rank holds the totals"),
        Check("every sample scored exactly once across the ranks", 3, _each_sample_once,
              hint="give rank r the samples r, r + world_size, r + 2 * world_size, ... (no padding)"),
        Check("every rank scores its own share of the samples", 2, _each_rank_scores_its_share,
              hint="each rank runs the model on its own part of the data; only the counts travel"),
        Check("accuracy equals the single-process accuracy", 3, _equals_single_process,
              hint="sum the correct counts and the sample counts over ranks, then divide; "
                   "an average of per-rank accuracies is wrong when shares differ in size"),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 2,
              every_rank_calls_the_same_collectives, needs="partial",
              hint="a collective blocks until every rank calls it: call it on all ranks, use the result on rank 0 only"),
    ],
)
