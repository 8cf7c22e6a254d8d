"""Launches under the real torchrun (jobs.py): every worker traced, every attempt kept, nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from autograder import diagnosis, evidence, jobs
from conftest import ROOT, alive, code_for, descendants


def run_job(host, tmp_path, code: str, job: jobs.Job, timeout: float = 60.0):
    script = code_for(host, job.name.split(",")[0], code)
    result = host.job(job.request(str(script), "gloo"), job.layout, host.directory(None, "job"), timeout=timeout,
                      meet_within=job.meet_within)
    return evidence.load(result, job)


PLACE = """
    import os
    import torch.distributed as dist
    dist.init_process_group("gloo")
    print("place", os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_PORT"])
    dist.barrier()
    dist.destroy_process_group()
"""


def test_each_worker_gets_torchruns_environment_and_is_traced(host, tmp_path):
    world = run_job(host, tmp_path, PLACE, jobs.standalone(3))
    assert world.complete, world.agent_output
    assert world.agents == {0: 0}
    places = [r.output.split("place ")[1].split()[:3] for r in world.ranks]
    assert places == [[str(r), str(r), "3"] for r in range(3)]
    assert all(r.first("init_process_group")["world_size"] == 3 for r in world.ranks)
    assert len({r.output.split()[-1] for r in world.ranks}) == 1  # one rendezvous for the job


def test_two_agents_meet_as_one_job_of_two_machines(host, tmp_path):
    port = _free_port()
    meet = ("--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=t")
    world = run_job(host, tmp_path, PLACE, jobs.Job("2 machines", 2, (meet, meet), nodes=2))
    assert world.complete, world.agent_output
    agents = sorted(r.first("worker")["env"]["AUTOGRADER_AGENT"] for r in world.ranks)
    assert agents == ["0", "1"] and all(r.first("init_process_group")["world_size"] == 2 for r in world.ranks)


def test_agents_that_never_meet_are_stopped_and_told_in_seconds(host, tmp_path):
    port = _free_port()
    apart = [("--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}",
              f"--rdzv-id={name}") for name in ("a", "b")]
    job = jobs.Job("2 machines", 2, tuple(apart), nodes=2, meet_within=5.0)
    world = run_job(host, tmp_path, PLACE, job)
    assert world.unmet is not None and 5 <= world.unmet < 15 and world.elapsed < 20
    assert "no rendezvous: the agents waited" in diagnosis.summary(world)


def test_agents_that_form_separate_jobs_are_told_by_the_rank_taken_twice(host, tmp_path):
    alone = ("--standalone", "--nproc-per-node=1")
    world = run_job(host, tmp_path, PLACE, jobs.Job("2 machines", 2, (alone, alone), nodes=2))
    assert world.duplicates and world.duplicates[0].startswith("attempt 0: rank 0, agent ")
    assert not world.complete and "the agents formed separate jobs" in diagnosis.summary(world)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_script_under_plain_python_has_no_launcher(host, tmp_path):
    world = run_job(host, tmp_path, "import os\nprint('RANK' in os.environ)\n", jobs.python())
    assert world.complete and world.ranks[0].output.strip() == "False"


def test_a_killed_worker_is_restarted_and_every_attempt_is_kept(host, tmp_path):
    code = """
        import torch
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(5):
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
    """
    fault = {"rank": 0, "attempt": 0, "when": "step", "n": 3}
    world = run_job(host, tmp_path, code, jobs.standalone(1, restarts=1, fault=fault))
    assert world.complete, world.agent_output
    first, second = world.attempts
    assert first[0].exitcode is None and not first[0].finished  # SIGKILL: no exit of its own
    assert world.faults == [{**fault, "agent": 0, "path": None, "lost": False}]
    assert len(first[0].of("optimizer_step")) == 3 and len(second[0].of("optimizer_step")) == 5
    assert second[0].first("worker")["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"


def test_a_lost_machine_takes_its_agent_and_workers_and_the_elastic_job_goes_on_smaller(host, tmp_path):
    code = """
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(6):
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            optimizer.step()
        dist.destroy_process_group()
    """
    world = run_job(host, tmp_path, code, jobs.elastic(2, lost_after=3))
    assert world.complete, world.agent_output
    assert [f["agent"] for f in world.faults] == [1] and world.faults[0]["lost"]
    assert list(world.agents) == [0]  # the lost machine's agent is not a failure of the job's
    first, *later = world.attempts
    assert len(first) == 2 and [len(a) for a in later] == [1] * len(later)
    lost = next(r for r in first if r.first("worker")["env"]["AUTOGRADER_AGENT"] == "1")
    assert lost.exitcode is None and len(lost.of("optimizer_step")) == 3  # SIGKILL after its third step
    survivor = world.ranks[0].first("worker")["env"]
    assert survivor["AUTOGRADER_AGENT"] == "0" and survivor["WORLD_SIZE"] == "1"
    assert len(world.ranks[0].of("optimizer_step")) == 6


def test_a_worker_that_crashes_by_a_signal_under_torchrun_is_named_as_the_cause(host, tmp_path):
    code = """
        import ctypes
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        dist.barrier()
        if dist.get_rank() == 1:
            ctypes.string_at(0)  # a segmentation fault, as a bug in native code gives
        dist.barrier()
    """
    world = run_job(host, tmp_path, code, jobs.standalone(2), timeout=60)
    assert not world.complete
    assert world.culprit() is not None and world.culprit().rank == 1, [(r.rank, r.exitcode) for r in world.ranks]
    assert "rank 1 was killed by SIGSEGV" in diagnosis.summary(world), diagnosis.summary(world)


def test_a_deadlock_under_torchrun_is_named_within_seconds(host, tmp_path):
    code = """
        import os
        import torch
        import torch.distributed as dist
        dist.init_process_group("gloo")
        if dist.get_rank() == 0:
            dist.all_reduce(torch.ones(1))
        else:
            dist.broadcast(torch.ones(1), src=0)
    """
    started = time.monotonic()
    world = run_job(host, tmp_path, code, jobs.standalone(2), timeout=60)
    assert time.monotonic() - started < 20
    assert world.hung and not world.complete
    assert "deadlock" in diagnosis.summary(world)
    assert "rank 0 in all_reduce" in diagnosis.summary(world)


@pytest.mark.parametrize("sandbox", ["auto", "off"])
def test_a_grader_killed_mid_job_leaves_no_agent_and_no_worker(sandbox, tmp_path):
    solution = ROOT / "tests" / "submissions" / "ex4_2" / "correct_step_snapshots.py"
    grader = subprocess.Popen([sys.executable, "-m", "autograder", "grade", "4.2", str(solution), "--quiet"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                              env={**os.environ, "AUTOGRADER_SANDBOX": sandbox, "TMPDIR": str(tmp_path)})
    try:
        deadline, workers = time.monotonic() + 60, []
        while time.monotonic() < deadline and len(workers) < 2:  # both workers of the first job are running
            time.sleep(0.1)
            tree = descendants(grader.pid)
            workers = [pid for pid in tree if "ranks.worker" in _command(pid)]
        assert len(workers) >= 2, "the job's workers never started"
        tree = descendants(grader.pid)
        os.kill(grader.pid, signal.SIGKILL)
        grader.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and alive(tree):
            time.sleep(0.1)
        assert [_command(pid) for pid in alive(tree)] == []
    finally:
        if grader.poll() is None:
            os.killpg(grader.pid, signal.SIGKILL)
            grader.wait()


def _command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_worker_that_forges_its_files_stops_nothing_but_itself(host, tmp_path):
    """Its pid file names the rank host (the agent's parent); a later attempt's folder is a link elsewhere."""
    code = """
        import os
        from pathlib import Path
        trace = Path(os.environ["AUTOGRADER_TRACE"])
        host = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()[1]
        (trace / "attempt0" / "rank0.pid").write_text(host)
        os.symlink("/etc", trace / "attempt1")
    """
    world = run_job(host, tmp_path, code, jobs.standalone(1))
    assert host.proc.poll() is None  # the host still serves
    assert len(world.attempts) == 1  # the link was not read as an attempt
    assert world.agents == {0: 0}


def test_the_rendezvous_clock_runs_only_while_every_agent_is_up_and_no_worker_runs(tmp_path):
    """A loaded machine makes agents slow to start and workers slow to import torch: neither is a
    rendezvous that did not form (8 graders at once on 2 CPUs, benchmarks/concurrent_graders.py)."""
    from autograder import files
    from autograder.launch import JobWatch

    folder = files.Folder(tmp_path)
    watch = JobWatch((2,), folder, [True, True])
    (tmp_path / "agent0.ready").touch()
    time.sleep(0.2)
    assert watch.idle() == 0.0  # agent 1 still starting
    (tmp_path / "agent1.ready").touch()
    time.sleep(0.2)
    assert watch.idle() >= 0.2  # both up, waiting for each other
    (tmp_path / "attempt0").mkdir()
    (tmp_path / "attempt0" / "rank1.pid").write_text("1234")
    watch.poll()
    time.sleep(0.2)
    assert watch.idle() == 0.0  # a worker started: importing torch, however long that takes
    watch.take({"exit": 1, "attempt": 0, "code": 0})
    time.sleep(0.2)
    assert watch.idle() >= 0.2  # it ended and no other worker runs: waiting again
    watch.close()
    folder.close()
