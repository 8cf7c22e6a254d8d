"""Submissions that tamper with the grader or fail in awkward ways: each is blocked, caught or told right.

Every submission here is graded as a student's would be, in the sandbox where this machine has
one; the fixtures prove that nothing it started is left running and nothing of it is left in
the temporary directory. The attacks on the sandbox itself and on the grader's parsers are
test_attacks.py's.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder import engine
from conftest import ROOT, SUBMISSIONS, edits, needs_sandbox

HOSTILE = SUBMISSIONS / "hostile"


def grade(name: str, **kwargs):
    """Grade a hostile submission: a file of its own, or a fault written as an edit of a correct one."""
    exercise = name.rsplit("_", 2)[-2] + "." + name.rsplit("_", 1)[-1]
    if name in edits.mistakes(HOSTILE):
        with tempfile.TemporaryDirectory() as tmp:
            return engine.grade(exercise, edits.write(HOSTILE, name, Path(tmp)), **kwargs)
    return engine.grade(exercise, HOSTILE / f"{name}.py", **kwargs)


def checks(report) -> dict:
    return {c.name: c for c in report.checks}


# -- tampering earns nothing ---------------------------------------------------------------


@pytest.mark.parametrize("name", ["forged_events_2_3", "replaces_all_reduce_2_3", "writes_the_event_log_2_3"])
def test_a_submission_that_tampers_with_the_instrumentation_scores_nothing(name, clean):
    report = grade(name)
    assert report.score == 0, report.to_text()
    assert "instrumentation" in report.problem
    assert all("nothing to grade" in c.message for c in report.checks if c.status != "skipped")


@pytest.mark.parametrize("name", ["nothing_2_2", "constant_2_3", "nothing_2_4"])
def test_doing_nothing_scores_nothing(name, clean):
    report = grade(name)
    assert report.score == 0, report.to_text()
    assert report.problem.startswith("Nothing to grade: ")
    assert all("nothing to grade" in c.message for c in report.checks if c.status != "skipped")


def test_the_expected_answer_is_nowhere_in_a_ranks_memory(clean):
    from autograder.exercises import ex2_3

    report = grade("hunts_for_the_answer_2_3")
    found = report.problem.split("FOUND", 1)[1].splitlines()[0]
    correct = ex2_3.expected(0)["correct"]
    expected = sum(correct) / len(correct)
    assert repr(expected) not in found and f"{expected:.6f}" not in found
    assert report.score == 0


def test_a_pickled_checkpoint_is_never_unpickled(clean):
    marker = Path("/tmp/unpickled")  # where the payload would write, if the grader unpickled it
    marker.unlink(missing_ok=True)
    report = grade("pickled_checkpoint_2_2")
    assert not marker.exists()
    assert report.score == 0


def test_a_checkpoint_built_to_choke_its_reader_is_read_capped(clean):
    report = grade("nested_checkpoint_3_3")
    by_name = checks(report)
    assert by_name["the checkpoint's model is the trained model and loads into a plain MLP"].status == "passed"
    optimizer = by_name["the checkpoint's optimizer state loads into a plain Adam and continues the run exactly"]
    assert optimizer.status == "failed" and "holds no Adam moments" in optimizer.message
    assert not report.problem, report.problem  # no host lost, no crash


def test_what_the_ranks_write_is_read_as_capped_plain_data(tmp_path):
    """A trace of the wrong kinds: a pickle as the snapshots, a link to a secret, a huge log, junk JSON."""
    from autograder import evidence
    from autograder.launch import LaunchResult, Layout, RankExit

    secret = tmp_path / "secret.txt"
    secret.write_text("the answer key")
    work = tmp_path / "world"
    work.mkdir()
    (work / "rank0.result.json").write_text(json.dumps({"result": 1.0, "snapshot_labels": ["a"], "tampered": []}))
    import pickle

    (work / "rank0.snapshots.npy").write_bytes(pickle.dumps(object()))
    (work / "rank0.stack").symlink_to(secret)
    (work / "rank0.log").write_text("x" * 10_000_000)
    (work / "rank1.result.json").write_text("{not json")
    from autograder import files

    folder = files.Folder(work)
    launch = LaunchResult(Layout(2), work, folder, [RankExit(0, 0, order=0), RankExit(1, 0, order=1)], 0.1, 10)
    assert folder.read_text("rank0.stack") == ""  # a link is not followed
    assert len(folder.read_text("rank0.log")) < 30_000  # head and tail only
    assert folder.read_array("rank0.snapshots.npy") is None  # a pickle is not loaded
    world = evidence.load(launch)
    assert world.ranks[0].snapshots == [] and "the parameter snapshots" in world.ranks[0].tampered
    assert not world.ranks[1].finished and not world.complete


# -- the sandbox -----------------------------------------------------------------------------




@needs_sandbox
def test_a_submission_that_kills_what_it_sees_and_forges_a_report_gets_nothing(clean):
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "2.3", str(HOSTILE / "kills_everything_2_3.py"),
                          "--json", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    report = json.loads(out.stdout)  # the grader's own report, whole, and nothing else on stdout
    assert report["score"] == 0 and report["exercise"] == "2.3"
    assert out.returncode == 1


@needs_sandbox
def test_the_ranks_run_as_an_unprivileged_user_without_the_graders_environment(tmp_path, clean, monkeypatch):
    monkeypatch.setenv("GRADER_SECRET", "token")
    script = tmp_path / "who.py"
    script.write_text("import os\nprint(os.getuid(), os.environ.get('GRADER_SECRET'), flush=True)\nos._exit(3)\n")
    report = engine.grade("2.2", script, [1])
    uid, secret = report.problem.split("Its last output:\n", 1)[1].split()[:2]
    assert int(uid) != 0 and secret == "None", report.problem


def test_the_report_says_when_the_sandbox_was_off(clean):
    report = grade("constant_2_3", sandbox_setting="off")
    assert report.sandbox.startswith("off") and "without the sandbox" in report.to_text()


def test_the_sandbox_can_be_required_and_is_refused_where_it_cannot_run(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no bwrap on PATH
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "2.3", str(HOSTILE / "constant_2_3.py"),
                          "--sandbox", "required"], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    assert out.returncode == 2
    assert "sandbox is required" in out.stderr and "bubblewrap" in out.stderr


# -- failures told right -----------------------------------------------------------------------


@pytest.mark.parametrize("name,first_line", [
    ("crash_on_rank1_2_3", "world size 2: rank 1 raised ValueError: rank 1 lost its data"),
    ("exits_on_rank1_2_3", "world size 2: rank 1 exited with code 3 before its code returned"),
    ("segfault_on_rank1_2_3", "world size 2: rank 1 was killed by SIGSEGV"),
    ("memory_hog_2_3", "world size 1: rank 0 raised MemoryError"),
])
def test_the_rank_that_failed_first_is_named_with_its_own_failure(name, first_line, clean):
    report = grade(name)
    assert report.problem.startswith(first_line), report.problem
    if "rank 1" in first_line:
        assert "rank(s) 0 failed or were stopped because it was gone" in report.problem.splitlines()[0]
    assert "Connection" not in report.problem.splitlines()[0]
    failed = [c.name for c in report.checks if c.status == "failed"]
    assert failed == ["the code runs to the end on every rank at every world size"], failed  # the crash, charged once


@pytest.mark.parametrize("name,cause", [
    ("mismatched_collectives_2_3", "rank 0 in all_reduce #1 (exercise cell line 21, in evaluate), "
                                   "rank 1 in broadcast #1 with root 0 (exercise cell line 19, in evaluate)"),
    ("shape_mismatch_2_3", "other shapes"),
    ("fixed_world_size_2_2", "passed world_size=4, but the launcher started 1 process(es)"),
    ("spawns_inside_2_2", "mp.spawn inside a script that the launcher already started"),
])
def test_a_deadlock_of_any_shape_is_told_in_seconds_with_its_cause(name, cause, clean):
    start = time.monotonic()
    report = grade(name)
    assert "deadlock" in report.problem.splitlines()[0] and cause in report.problem.splitlines()[0], report.problem
    assert time.monotonic() - start < 40  # three launches, each stopped within seconds, not at its time limit
    assert report.score == 0


def test_a_rank_still_computing_is_never_called_hung(clean):
    report = grade("slow_rank0_2_3")
    assert report.all_passed, report.to_text()


def test_the_time_limit_is_stated_when_it_is_hit(tmp_path, clean):
    script = tmp_path / "forever.py"
    script.write_text("import time\ntime.sleep(600)\n")
    report = engine.grade("2.2", script, [1], timeout=2)
    assert "at the time limit of 2 s" in report.problem


def test_a_crash_at_one_world_size_keeps_the_share_of_the_points_judged_at_the_others(clean):
    report = grade("crash_at_world_size_3_2_3")
    by_name = checks(report)
    assert by_name["the code runs to the end on every rank at every world size"].status == "failed"
    # of the world sizes of several processes, 2 and 3, every other check held at 2 and was not judged at 3
    assert report.score == (report.max_score - 1) / 2, report.to_text()
    assert all(c.message.startswith("held at world size 2; not judged at world size 3")
               for c in report.checks if c.status == "error"), report.to_text()
    assert report.problem.startswith("world size 3:")


def test_a_function_exercise_runs_with_an_argv_of_its_own(clean):
    assert grade("parses_arguments_2_3").all_passed


def test_a_rank_reading_its_stdin_reads_nothing_of_the_graders_requests(clean):
    assert grade("reads_stdin_2_3").all_passed


@pytest.mark.parametrize("name", ["huge_output_2_3", "huge_output_then_crash_2_3"])
def test_a_50_mb_line_of_output_does_not_reach_the_report(name, clean):
    report = grade(name)
    assert len(report.to_json()) < 100_000 and len(report._repr_html_()) < 200_000


@needs_sandbox
def test_a_fork_bomb_is_stopped_by_the_process_limit_and_cleaned_up(clean):
    report = grade("fork_bomb_2_3", world_sizes=[1])
    assert "fork failed after" in report.problem and report.score == 0


@pytest.mark.parametrize("content,message", [
    (b"\x89PNG\r\n\x1a\n\x00\x00binary", "not UTF-8"),
    ("def evaluate():\n    return 'caf\u00e9'\n".encode("latin-1"), "not UTF-8"),
    (b"x = 1\x00\n", "binary data"),
])
def test_a_file_that_is_not_python_text_gets_one_line_saying_so(tmp_path, content, message):
    path = tmp_path / "answer.py"
    path.write_bytes(content)
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "2.3", str(path)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
    assert path.read_bytes() == content


def test_a_grader_stopped_by_sigterm_leaves_nothing_behind(tmp_path, clean):
    script = tmp_path / "forever.py"
    script.write_text("import subprocess, sys, time\n"
                      "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)\n"
                      "time.sleep(600)\n")
    grader = subprocess.Popen([sys.executable, "-m", "autograder", "grade", "2.2", str(script), "--quiet"],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(8)  # the ranks are running
    grader.send_signal(signal.SIGTERM)
    _, err = grader.communicate(timeout=30)
    assert grader.returncode == 130 and "interrupted" in err
