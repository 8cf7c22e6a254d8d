"""Exercise 3.6 judges predictions of the training state per rank by the grader's own count: the count
must be what PyTorch really holds, measured on real ranks under DDP, ZeRO-1 and FSDP."""

from __future__ import annotations

from autograder.exercises import ex3_6
from ddpcourse.processes import launch


def _measured(rank: int, world_size: int, seed: int):
    return {scheme: ex3_6.measure(scheme, seed, rank, world_size) for scheme in ex3_6.SCHEMES}


def test_the_grader_count_of_training_state_per_rank_is_what_the_ranks_measure():
    for seed in (0, 7):
        for world_size in (2, 3):
            measured = launch(_measured, world_size=world_size, seed=seed)
            for scheme in ex3_6.SCHEMES:
                assert [m[scheme] for m in measured] == ex3_6.counted(scheme, ex3_6.shapes_of(seed), world_size)
