"""The launcher: torchrun's environment, a rendezvous per launch, deadlocks told from slow work, cleanup."""

from __future__ import annotations

import subprocess
import sys

from autograder import diagnosis, evidence
from autograder.launch import Layout
from conftest import code_for


def run(host, tmp_path, name: str, code: str, layout: Layout, **kwargs):
    script = code_for(host, name, code)
    return host.launch({"kind": "script", "student": str(script)}, layout, host.directory(None, name), **kwargs)


ENVIRONMENT = """
    import os
    import torch.distributed as dist
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")
    print(" ".join(f"{n}={os.environ[n]}" for n in names))
    dist.init_process_group("gloo")
    dist.barrier()
    dist.destroy_process_group()
"""


def _fields(output: str) -> dict[str, str]:
    return dict(item.split("=") for item in output.splitlines()[0].split())


def test_ranks_get_torchruns_environment_and_their_own_rendezvous(host, tmp_path):
    first = run(host, tmp_path, "a", ENVIRONMENT, Layout(4, nodes=2))
    second = run(host, tmp_path, "b", ENVIRONMENT, Layout(4, nodes=2))
    assert [r.exitcode for r in first.ranks] == [0, 0, 0, 0]
    seen = [_fields(r.output) for r in first.ranks]
    assert [s["RANK"] for s in seen] == ["0", "1", "2", "3"]
    assert [s["LOCAL_RANK"] for s in seen] == ["0", "1", "0", "1"]
    assert [s["GROUP_RANK"] for s in seen] == ["0", "0", "1", "1"]
    assert {s["WORLD_SIZE"] for s in seen} == {"4"} and {s["LOCAL_WORLD_SIZE"] for s in seen} == {"2"}
    assert _fields(second.ranks[0].output)["MASTER_PORT"] != seen[0]["MASTER_PORT"]


def test_a_rank_left_waiting_in_a_collective_is_a_deadlock_within_seconds(host, tmp_path):
    result = run(host, tmp_path, "stuck", """
        import torch, torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(3))  # the others never call it
    """, Layout(3), timeout=60)
    assert not result.timed_out and result.elapsed < 15
    assert [r.exitcode for r in result.ranks][1:] == [0, 0]
    # gloo either keeps rank 0 waiting (the grader stops it) or raises once the peers' sockets close
    summary = diagnosis.summary(evidence.load(result))
    assert "deadlock: rank 0 in all_reduce #1 (stuck.py line 6" in summary, summary
    assert "rank(s) 1, 2 ended without calling" in summary


def test_a_rank_still_computing_is_waited_for_not_called_hung(host, tmp_path):
    result = run(host, tmp_path, "slow", """
        import time, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 0:
            time.sleep(4)  # a long evaluation on rank 0 only, longer than any grace period
            print("rank 0 evaluated")
        dist.barrier()
        dist.destroy_process_group()
    """, Layout(2), timeout=60, quiet=1.0)
    assert result.stall is None and not result.timed_out
    assert [r.exitcode for r in result.ranks] == [0, 0]


def test_the_wall_clock_limit_stops_ranks_and_keeps_their_stacks(host, tmp_path):
    result = run(host, tmp_path, "forever", "import time\ntime.sleep(600)\n", Layout(2), timeout=1.5)
    assert result.timed_out
    assert all(r.exitcode is None and "forever.py" in r.stack for r in result.ranks)


def test_a_time_limit_passed_on_a_busy_machine_says_the_machine_was_busy(host, tmp_path):
    result = run(host, tmp_path, "forever", "import time\ntime.sleep(600)\n", Layout(2), timeout=1.5)
    result.load = 0.5
    assert "still running at the time limit of 1.5 s" in diagnosis.summary(evidence.load(result))
    assert "busy" not in diagnosis.summary(evidence.load(result))
    result.load = 6.0  # what the 1-minute load average per CPU is after minutes of 8 graders on 2 CPUs
    said = diagnosis.summary(evidence.load(result))
    assert "the machine was busy (6.0 runnable processes per CPU)" in said and "--timeout" in said


def test_a_crash_is_reported_with_the_order_of_exits(host, tmp_path):
    result = run(host, tmp_path, "crash", """
        import time, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 1:
            raise ValueError("boom on rank 1")
        dist.all_reduce(torch.ones(1))
    """, Layout(2))
    assert result.ranks[1].exitcode == 1 and "ValueError: boom on rank 1" in result.ranks[1].output
    assert result.ranks[1].order == 0


def test_the_whole_process_tree_is_killed_even_children_that_left_the_group(host, tmp_path):
    result = run(host, tmp_path, "daemons", """
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(600)
            os._exit(0)
        time.sleep(600)
    """, Layout(2), timeout=2.0)
    assert result.timed_out  # the fixture then proves nothing of it is left


def test_two_graders_at_once_do_not_collide(tmp_path):
    solution = "tests/submissions/ex2_3/correct_strided.py"
    command = [sys.executable, "-m", "autograder", "grade", "2.3", solution, "--quiet"]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in runs]
    assert [p.returncode for p in runs] == [0, 0], outputs
