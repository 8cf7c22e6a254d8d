"""The launcher: torchrun's environment, a rendezvous per launch, hangs, timeouts, cleanup."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import torch.distributed as dist

from autograder.launch import Layout, launch


def _env_target(rank, layout):
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    print(" ".join(f"{n}={os.environ[n]}" for n in names))
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()


def _fields(output: str) -> dict[str, str]:
    return dict(item.split("=") for item in output.split())


def test_ranks_get_torchruns_environment_and_their_own_rendezvous(tmp_path, no_leftover_processes):
    first = launch(_env_target, Layout(4, nodes=2), tmp_path / "a")
    second = launch(_env_target, Layout(4, nodes=2), tmp_path / "b")
    assert [r.exitcode for r in first.ranks] == [0, 0, 0, 0]
    seen = [_fields(r.output) for r in first.ranks]
    assert [s["RANK"] for s in seen] == ["0", "1", "2", "3"]
    assert [s["LOCAL_RANK"] for s in seen] == ["0", "1", "0", "1"]
    assert [s["GROUP_RANK"] for s in seen] == ["0", "0", "1", "1"]
    assert {s["WORLD_SIZE"] for s in seen} == {"4"} and {s["LOCAL_WORLD_SIZE"] for s in seen} == {"2"}
    assert _fields(second.ranks[0].output)["MASTER_PORT"] != seen[0]["MASTER_PORT"]


def _rank0_waits_forever(rank, layout):
    dist.init_process_group("gloo")
    dist.barrier()  # all connected, so that the others' exit cannot break rank 0's start
    if rank == 0:
        time.sleep(600)  # stands for a collective the other ranks never call
    dist.destroy_process_group()


def test_a_rank_left_waiting_is_reported_as_a_hang_within_seconds(tmp_path, no_leftover_processes):
    result = launch(_rank0_waits_forever, Layout(3), tmp_path, grace=2.0, timeout=60)
    assert result.hung and not result.timed_out
    assert result.elapsed < 10
    assert [r.exitcode for r in result.ranks] == [None, 0, 0]
    assert "_rank0_waits_forever" in result.ranks[0].stack
    assert "test_launch.py" in result.ranks[0].stack


def _everyone_waits(rank, layout):
    time.sleep(600)


def test_the_wall_clock_limit_stops_ranks_and_keeps_their_stacks(tmp_path, no_leftover_processes):
    result = launch(_everyone_waits, Layout(2), tmp_path, timeout=1.5)
    assert result.timed_out
    assert all(r.exitcode is None and "_everyone_waits" in r.stack for r in result.ranks)


def _raises_on_rank1(rank, layout):
    print(f"rank {rank} starting")
    if rank == 1:
        raise ValueError("boom on rank 1")
    time.sleep(600)


def test_a_crash_stops_the_others_and_keeps_each_ranks_output(tmp_path, no_leftover_processes):
    result = launch(_raises_on_rank1, Layout(2), tmp_path, grace=1.0)
    assert result.ranks[1].exitcode == 1 and "ValueError: boom on rank 1" in result.ranks[1].output
    assert result.ranks[0].exitcode is None and "rank 0 starting" in result.ranks[0].output
    assert not result.hung


def _starts_a_grandchild(rank, layout):
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    time.sleep(600)


def test_the_whole_process_tree_is_killed(tmp_path, no_leftover_processes):
    result = launch(_starts_a_grandchild, Layout(2), tmp_path, timeout=2.0)
    assert result.timed_out  # the fixture then proves nothing of it is left


def test_two_graders_at_once_do_not_collide(tmp_path):
    solution = "tests/submissions/ex2_4/correct_strided.py"
    command = [sys.executable, "-m", "autograder", "grade", "2.4", solution, "--quiet"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
