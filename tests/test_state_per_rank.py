"""Exercises 1.5 and 3.6 judge predictions of what each rank holds and sends by the grader's own count:
the count must be what real ranks hold and send, measured under each scheme."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from autograder.exercises import ex1_5, ex3_6
from ddpcourse.given import ex1_5 as given_1_5
from ddpcourse.given import ex3_6 as given_3_6
from ddpcourse.optim import Adam
from ddpcourse.processes import launch
from ranks.exercises import ex1_5 as harness_1_5
from ranks.exercises import ex3_6 as harness_3_6


def _measured(rank: int, world_size: int, seed: int):
    return {scheme: harness_3_6.measure(scheme, seed, rank, world_size) for scheme in given_3_6.SCHEMES}


def test_the_grader_count_of_training_state_per_rank_is_what_the_ranks_measure():
    for seed in (0, 7):
        for world_size in (2, 3):
            measured = launch(_measured, world_size=world_size, seed=seed)
            for scheme in given_3_6.SCHEMES:
                assert [m[scheme] for m in measured] == ex3_6.counted(scheme, given_3_6.shapes_of(seed), world_size)


def _run_and_count_sends(rank: int, world_size: int, scheme: str, adam):
    sent = []
    originals = {name: getattr(dist, name) for name in ("send", "isend")}
    for name, original in originals.items():
        setattr(dist, name, lambda tensor, *a, _o=original, **k: sent.append(tensor.numel() * tensor.element_size()) or _o(tensor, *a, **k))
    try:
        held = harness_1_5._MEASURED_RUNS[scheme](rank, world_size, adam=adam)
    finally:
        for name, original in originals.items():
            setattr(dist, name, original)
    return {**held, "sent": sum(sent)}


@pytest.mark.parametrize("scheme", given_1_5.SCHEMES)
def test_the_costs_counted_for_1_5_are_what_a_real_step_holds_and_sends(scheme):
    """With torch.optim.Adam, and with the course's Adam that the graded ranks use: the same figures."""
    for world_size in (1, 2, 3, 4):
        for adam in (torch.optim.Adam, Adam):
            measured = launch(_run_and_count_sends, world_size=world_size, scheme=scheme, adam=adam)
            busiest = {q: max(m[q] for m in measured) for q in given_1_5.QUANTITIES}
            counted = ex1_5.expected(scheme, *given_1_5.MEASURED[:3], world_size, given_1_5.MEASURED[3])
            assert busiest == counted, (world_size, adam)
