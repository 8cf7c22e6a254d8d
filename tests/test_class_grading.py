"""`python -m autograder class`: a whole class graded several notebooks at once, here or as a Slurm job array, into
nbgrader's gradebook exactly as `nbgrader autograde` puts it there; interrupted, it goes on where it stopped; a
grader process that dies costs nothing but time; nothing is left running.

The class (problem set 1): `correct` hands in the solutions, `wrong` a 1.2 whose ranks all send to rank 0, `empty`
the released notebook. One copy of it is autograded by nbgrader, one notebook after another; every test grades
another copy with the class command and compares the gradebooks cell by cell.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from conftest import SUBMISSIONS, descendants, handed_in
from test_nbgrader_flow import handed_in_class, nbgrader_in

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions" / "01_parallelism.ipynb"
ASSIGNMENT = "ps1"


@pytest.fixture(scope="module")
def handed(tmp_path_factory):
    """The class handed in (not graded yet), and the gradebook nbgrader autograde makes of it."""
    def class_of(released, solutions, correct):
        wrong = {**correct, "1.2": (SUBMISSIONS / "ex1_2" / "wrong_gather_to_rank0.py").read_text()}
        return {"correct": solutions, "wrong": handed_in(released, wrong),
                "empty": nbformat.read(released, as_version=4)}

    start = handed_in_class(tmp_path_factory.mktemp("class") / "start", SOURCE, ASSIGNMENT, class_of)
    serial = start.parent / "serial"
    shutil.copytree(start, serial)
    nbgrader_in(serial)[0]("autograde", ASSIGNMENT)
    return start, grades(serial)


def grades(course: Path) -> dict:
    """(student, check cell) -> (score, max score), as the gradebook holds them."""
    found = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for submission in gradebook.assignment_submissions(ASSIGNMENT):
            for notebook in submission.notebooks:
                found.update({(submission.student_id, g.name): (g.score, g.max_score) for g in notebook.grades})
    return found


def copy_of(handed, tmp_path: Path) -> Path:
    course = tmp_path / "course"
    shutil.copytree(handed[0], course)
    return course


def class_command(course: Path, *args) -> subprocess.Popen:
    env = nbgrader_in(course)[1]
    return subprocess.Popen([sys.executable, "-m", "autograder", "class", ASSIGNMENT, "--course", str(course), *args],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def lines_until(process: subprocess.Popen, prefix: str) -> list[str]:
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith(prefix):
            return seen
    raise AssertionError(f"no line starting {prefix!r}:\n{''.join(seen)}")


def test_an_interrupted_class_goes_on_where_it_stopped_and_ends_with_nbgraders_own_grades(handed, tmp_path,
                                                                                        no_leftover_processes):
    course = copy_of(handed, tmp_path)
    first = class_command(course, "--jobs", "2")
    lines_until(first, "[1/3]")
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C reaches the whole job, graders and ranks
    said = first.stdout.read()
    assert first.wait(timeout=60) == 130 and "interrupted: what was graded is kept" in said, said
    assert not (course / "autograded").exists(), "nothing is recorded before the grading is over"
    kept = len(list((course / ".autograder" / ASSIGNMENT).glob("*.json")))
    assert kept >= 1

    again = subprocess.run([sys.executable, "-m", "autograder", "class", ASSIGNMENT, "--course", str(course)],
                           cwd=ROOT, env=nbgrader_in(course)[1], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    graded_now = int(again.stdout.split("recording with nbgrader autograde ps1 (")[1].split(" ")[0])
    assert kept + graded_now <= len(handed[1]), again.stdout  # what the first run graded is not graded again
    assert grades(course) == handed[1]
    nbgrader_in(course)[0]("generate_feedback", ASSIGNMENT)  # nbgrader works on what the class command made
    assert len(list((course / "feedback").glob(f"*/{ASSIGNMENT}/*.html"))) == 3


def test_a_grader_process_that_dies_costs_only_time(handed, tmp_path, no_leftover_processes):
    course = copy_of(handed, tmp_path)
    run = class_command(course, "--jobs", "2")
    lines_until(run, "3 notebook(s)")
    deadline = time.monotonic() + 60
    graders = []
    while not graders and time.monotonic() < deadline:  # a grader process that has started grading: it has children
        graders = [pid for pid in descendants(run.pid) if b"multiprocessing" in command_line(pid) and descendants(pid)]
        time.sleep(0.05)
    assert graders, "no grader process started grading"
    os.kill(graders[0], signal.SIGKILL)
    said = run.stdout.read()
    assert run.wait(timeout=600) == 0, said
    assert grades(course) == handed[1], said
    assert "recording with nbgrader autograde ps1 (" in said and "not graded here" not in said, said


def slurm_conf() -> str | None:
    """The course's Slurm (scripts/slurm.sh start), where it runs with both its nodes up."""
    conf = os.environ.get("SLURM_CONF") or "/tmp/ddpcourse-slurm/slurm.conf"
    if not shutil.which("sbatch") or not Path(conf).exists():
        return None
    up = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], env={**os.environ, "SLURM_CONF": conf},
                        capture_output=True, text=True, timeout=30)
    nodes = {line.split()[0] for line in up.stdout.splitlines() if "idle" in line or "mix" in line or "alloc" in line}
    return conf if up.returncode == 0 and len(nodes) >= 2 else None


SLURM_CONF = slurm_conf()  # once, before any job of the tests makes its nodes busy


@pytest.mark.skipif(SLURM_CONF is None, reason="no Slurm with two nodes up here (bash scripts/slurm.sh start, as root)")
def test_a_class_graded_as_a_slurm_job_array_gets_nbgraders_grades(handed, tmp_path, no_leftover_processes):
    course = copy_of(handed, tmp_path)
    env = {**nbgrader_in(course)[1], "SLURM_CONF": SLURM_CONF}
    done = subprocess.run([sys.executable, "-m", "autograder", "class", ASSIGNMENT, "--course", str(course),
                           "--slurm", "--jobs", "3"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "as a Slurm job array" in done.stdout and "(node n" in done.stdout, done.stdout
    assert "not graded by the job array" not in done.stdout, done.stdout
    assert grades(course) == handed[1]
    left = sorted(p.name for p in (course / ".autograder" / ASSIGNMENT).iterdir() if not p.name.endswith(".json")
                  or p.name.startswith("array-"))
    assert not left, left  # the array's plan, its tasks' lines and the logs of tasks that finished are removed


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


def test_a_folder_that_is_not_an_nbgrader_course_is_told_what_to_do(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder", "class", ASSIGNMENT, "--course", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "not an nbgrader course directory" in done.stderr, done.stderr
