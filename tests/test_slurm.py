"""The course's Slurm (scripts/slurm.sh): lesson 4's batch script and training script, as the lesson writes them,
run as a job of 2 nodes x 2 processes, preempted with `scontrol requeue`, resume from the snapshot written on
SIGTERM and train no step twice. Skipped where no Slurm with two nodes runs (it needs root: CI starts it)."""

import os
import re
import subprocess
import sys
import time

import nbformat
import pytest

from conftest import ROOT
from test_class_grading import slurm_conf

CONF = slurm_conf()  # once: while a job runs, its nodes are busy, not idle
pytestmark = pytest.mark.skipif(CONF is None,
                                reason="no Slurm with two nodes up here (bash scripts/slurm.sh start, as root)")


def lesson_file(marker: str) -> str:
    """The text that lesson 4's %%writefile cell whose target is `marker` writes."""
    for cell in nbformat.read(ROOT / "lessons" / "04_torchrun.ipynb", as_version=4).cells:
        if cell.cell_type == "code" and cell.source.startswith(f"%%writefile ${marker}"):
            return cell.source.split("\n", 1)[1]
    raise AssertionError(f"lesson 4 writes no ${marker}")


def slurm(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SLURM_CONF": CONF})
    assert done.returncode == 0, done.stderr
    return done.stdout


def state(job: str) -> str:
    found = re.search(r"JobState=(\S+)", slurm("scontrol", "show", "job", job))
    return found.group(1) if found else "GONE"


def test_the_lessons_job_preempted_and_requeued_resumes_from_its_snapshot_and_trains_no_step_twice(tmp_path):
    (tmp_path / "train_preemptible.py").write_text(lesson_file("PREEMPTIBLE_SCRIPT"))
    (tmp_path / "job.sh").write_text(lesson_file("BATCH_SCRIPT"))
    log = tmp_path / "job.out"
    env_path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    job = slurm("sbatch", "--parsable", f"--output={log}", f"--chdir={tmp_path}",
                f"--export=ALL,PYTHON={sys.executable},PYTHONPATH={env_path}", str(tmp_path / "job.sh")).strip()
    steps = lambda: [int(s) for s in re.findall(r"^\S+ step (\d+) ", log.read_text() if log.exists() else "", re.M)]  # noqa: E731
    deadline = time.monotonic() + 180
    try:
        while len(steps()) < 14 and time.monotonic() < deadline:
            time.sleep(0.2)
        slurm("scontrol", "requeue", job)
        while state(job) != "PENDING" and time.monotonic() < deadline:
            time.sleep(0.1)
        slurm("scontrol", "update", f"JobId={job}", "StartTime=now")
        while state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "GONE") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert state(job) == "COMPLETED", log.read_text()
    finally:
        if state(job) not in ("COMPLETED", "FAILED", "CANCELLED", "GONE"):
            subprocess.run(["scancel", job], env={**os.environ, "SLURM_CONF": CONF})
    text = log.read_text()
    starts = [int(s) for s in re.findall(r"start at step (\d+) world 4 ", text)]
    on_sigterm = [int(s) for s in re.findall(r"snapshot at step (\d+) \(on SIGTERM\)", text)]
    assert len(starts) == 2 and len(on_sigterm) == 1 and starts[1] == on_sigterm[0] > 10, text
    assert "restart 1" in text and sorted(steps()) == list(range(1, 41)), text  # every step once, all 40
