"""Exercise 2.3: global evaluation. Every sample counts once; every rank gets the global accuracy."""

from __future__ import annotations

import numbers
from collections import Counter

from autograder.checks import Check, each_rank, every_rank_calls_the_same_collectives, shares_disjoint_and_covering
from autograder.exercises import Exercise
from autograder.hints import Hint
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
        if (r.first("returned") or {}).get("tensor"):
            return (f"{world.label}: rank {r.rank} returned a one-element tensor ({r.result:.6g}), not a Python "
                    "float: the caller gets a tensor where the exercise promises a number")


def _same_on_every_rank(runs):
    for world in runs:
        values = [r.result for r in world.ranks]
        if len(set(values)) > 1:
            return f"{world.label}: the ranks returned different accuracies {values}"


def _each_sample_once(runs):
    """Each sample scored by exactly one rank. A rank that scores its own samples twice (a second forward pass to log
    the loss) splits the work right; counting them twice would show in the accuracy."""
    for world in runs:
        shares = {r.rank: list(dict.fromkeys(i for e in r.of("scored") for i in e["indices"])) for r in world.ranks}
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
        Check("returns a number on every rank", 1, _returns_a_number, hint=Hint(
            idea="evaluate returns the accuracy as a plain Python number on every rank, not a tensor, a list or "
                 "nothing.",
            section="1:2. The collectives",
            where="The return statement at the end of your `evaluate`, as every rank reaches it.",
            how="Return a Python float on every rank: counts exchanged as tensors stay tensors, so turn the final "
                "ratio (or each total) into a Python number before returning it.")),
        Check("every rank returns the same accuracy", 2, _same_on_every_rank, hint=Hint(
            idea="Every rank must end with the global totals, so that each computes the same accuracy: with no "
                 "exchange, or one that leaves the result on a single rank, each rank keeps its own counts.",
            section="1:2. The collectives",
            where="How your ranks exchange their counts, and what each rank divides to get the value it returns.",
            how="Combine the counts with a collective that leaves the sums on every rank, then have every rank compute "
                "the accuracy from those totals, none from its own counts.",
            lines_of=("collective",))),
        Check("every sample scored exactly once across the ranks", 3, _each_sample_once, hint=Hint(
            idea="Every sample must be scored by exactly one rank. DistributedSampler makes shares equal by repeating "
                 "samples (or by dropping some), which a metric then counts twice (or never).",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="How your `evaluate` gives each rank its share of the dataset: the indices each rank scores.",
            how="Split the indices among the ranks with no padding and nothing dropped, by hand or with a sampler that "
                "does neither, so that together the shares cover the dataset once; shares may differ in size.")),
        Check("every rank scores its own share of the samples", 2, _each_rank_scores_its_share, hint=Hint(
            idea="The work is shared: each rank runs the model on its own part of the data, and only the counts "
                 "travel between the ranks.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="Which samples each rank runs the model on in your `evaluate`: whether one rank scores everything, "
                  "or the shares come out far from even.",
            how="Choose each rank's share from its rank and the world size, about the dataset's size divided by the "
                "world size, and have each rank score its share and nothing more.")),
        Check("accuracy equals the single-process accuracy", 3, _equals_single_process, hint=Hint(
            idea="The global accuracy is the total of correct predictions over the total of samples. The mean of "
                 "the ranks' accuracies differs when the shares differ in size, and one rank's own is no global one.",
            section="9. Putting it together: a training script for `torchrun`",
            where="What your ranks exchange, and how the final ratio is formed from it.",
            how="Sum two counts over the ranks, the correct predictions and the samples scored, and divide only the "
                "totals; an average of per-rank accuracies weighs a small share like a large one.",
            lines_of=("collective",))),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 2,
              every_rank_calls_the_same_collectives, needs="partial", hint=Hint(
                  idea="A collective completes only when every rank calls it, as often and in the same order: one "
                       "inside a branch for rank 0, or one per batch when the shares hold different numbers of "
                       "batches, leaves ranks waiting.",
                  section="10. Break it: ranks that disagree",
                  where="The collectives in your `evaluate`, how often each rank reaches them, and any test of the "
                        "rank around them.",
                  how="Have every rank call the exchange the same number of times, outside any branch on the rank "
                      "(once, after all the scoring, is simplest); what one rank alone needs goes after it.",
                  lines_of=("collective",))),
    ],
)
