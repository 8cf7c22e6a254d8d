"""ddpcourse.processes.launch: results in rank order, a rank's error raised in the parent, nothing left behind."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist

from ddpcourse.processes import LaunchTimeout, RankFailed, launch


def _gather_ranks(rank, world_size, scale):
    t = torch.tensor([float(rank)])
    everyone = [torch.empty(1) for _ in range(world_size)]
    dist.all_gather(everyone, t)
    return {"rank": rank, "world_size": world_size, "seen": [scale * x.item() for x in everyone]}


def test_results_come_back_in_rank_order(no_leftover_processes):
    results = launch(_gather_ranks, world_size=3, scale=10)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["seen"] == [0.0, 10.0, 20.0] for r in results)


def _fails_on_rank_1(rank, world_size):
    if rank == 1:
        raise ValueError("rank 1 has a bad batch")
    dist.all_reduce(torch.ones(1))  # left waiting for rank 1, which never comes


def test_an_exception_in_one_rank_is_raised_in_the_parent(no_leftover_processes):
    started = time.monotonic()
    with pytest.raises(RankFailed, match="rank 1 has a bad batch") as caught:
        launch(_fails_on_rank_1, world_size=3, timeout=30)
    assert caught.value.rank == 1
    assert "Traceback" in caught.value.details and "_fails_on_rank_1" in caught.value.details
    assert time.monotonic() - started < 15


def _rank_0_sleeps(rank, world_size):
    if rank == 0:
        time.sleep(60)


def test_a_timeout_stops_the_ranks_and_tells_where_they_were(no_leftover_processes):
    with pytest.raises(LaunchTimeout, match="rank\\(s\\) 0, 1 still running") as caught:
        launch(_rank_0_sleeps, world_size=2, timeout=2)
    assert "_rank_0_sleeps" in str(caught.value)  # rank 0's stack: in the sleep
