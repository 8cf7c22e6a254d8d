"""The command-line contract other tools rely on."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat

from autograder import exercises
from conftest import ROOT, SUBMISSIONS


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)


def test_list_prints_one_exercise_id_a_line():
    out = run("list")
    assert out.returncode == 0
    assert out.stdout.split() == exercises.ids() == ["1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "3.0", "3.1", "3.2", "3.3", "3.4", "3.5", "3.6", "3.7", "3.8", "4.0", "4.1", "4.2", "4.3", "4.4", "4.5", "4.6"]


def test_grade_json_contract_on_a_wrong_solution():
    out = run("grade", "2.3", str(SUBMISSIONS / "ex2_3" / "wrong_mean_of_accuracies.py"), "--json",
              "--world-sizes", "1,2,3")
    assert out.returncode == 1
    report = json.loads(out.stdout)
    assert {"exercise", "score", "max_score", "backend", "world_sizes", "checks"} <= set(report)
    assert report["exercise"] == "2.3" and report["backend"] == "gloo" and report["world_sizes"] == [1, 2, 3]
    for check in report["checks"]:
        assert set(check) == {"name", "status", "points", "max_points", "message", "hints"}
        assert check["status"] in ("passed", "failed", "error", "timeout", "skipped")
        assert (check["hints"] is not None) == (check["status"] == "failed"), check  # the steps of hints.py
    failed = next(c for c in report["checks"] if c["hints"])
    assert {"idea", "lesson", "section", "where", "how"} <= set(failed["hints"]) and "\nHint: " in failed["message"]
    assert 0 < report["score"] < report["max_score"]


def test_grade_exits_0_when_every_check_passed_and_reports_progress_on_stderr():
    out = run("grade", "2.1", str(SUBMISSIONS / "ex2_1" / "correct_environ.py"), "--world-sizes", "2")
    assert out.returncode == 0, out.stdout
    assert "all checks passed" in out.stdout
    assert "world size 2" in out.stderr


def test_grade_takes_the_exercise_cell_from_a_notebook(tmp_path):
    nb = nbformat.v4.new_notebook()
    code = (SUBMISSIONS / "ex2_3" / "correct_blocks.py").read_text()
    nb.cells = [nbformat.v4.new_markdown_cell("intro"), nbformat.v4.new_code_cell("%%exercise 2.3\n" + code)]
    path = tmp_path / "work.ipynb"
    nbformat.write(nb, path)
    out = run("grade", "2.3", str(path), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["score"] > 0


def test_usage_errors_exit_2_with_one_line(tmp_path):
    cases = [
        ("grade", "9.9", str(SUBMISSIONS / "ex2_3" / "correct_blocks.py")),
        ("grade", "2.3", str(tmp_path / "missing.py")),
        ("grade", "2.3", str(SUBMISSIONS / "ex2_3" / "correct_blocks.py"), "--world-sizes", "two"),
        ("bogus",),
    ]
    for args in cases:
        out = run(*args)
        assert out.returncode == 2, args
        assert out.stdout == "" and len(out.stderr.strip().splitlines()) == 1, (args, out.stderr)


def test_a_notebook_without_the_exercise_cell_says_how_to_mark_it(tmp_path):
    path = tmp_path / "empty.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), path)
    out = run("grade", "2.2", str(path))
    assert out.returncode == 2
    assert "%%exercise 2.2" in out.stderr


def test_code_that_does_not_compile_is_reported_without_launching(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("def evaluate(model, dataset:\n    pass\n")
    out = run("grade", "2.3", str(path))
    assert out.returncode == 1
    assert "does not compile" in out.stdout and "line 1" in out.stdout


def test_grade_all_grades_the_exercises_the_notebook_holds():
    out = run("grade", "all", "solutions/01_parallelism.ipynb", "--quiet")
    assert out.returncode == 0, out.stderr
    assert [line.split(" (")[0] for line in out.stdout.splitlines() if line.startswith("Exercise ")] == \
        ["Exercise 1.0", "Exercise 1.1", "Exercise 1.2", "Exercise 1.3", "Exercise 1.4",
         "Exercise 1.5"]
    refused = run("grade", "all", "README.md")
    assert refused.returncode == 2 and "is not one" in refused.stderr


def test_a_students_checks_are_noted_beside_the_notebook_and_progress_shows_the_best_and_what_next(tmp_path):
    from conftest import handed_in

    released = ROOT / "exercises" / "02_ddp_basics.ipynb"
    notebook = tmp_path / released.name
    progress_file = tmp_path / "ddp-course-progress.json"

    def hand_in(code: str | None):
        nbformat.write(handed_in(released, {"2.3": code} if code else {}), notebook)

    def kept() -> dict:
        return json.loads(progress_file.read_text())["exercises"]

    hand_in(None)
    run("grade", "2.3", str(notebook))
    assert not progress_file.exists(), "an exercise as handed out is not a check of the student's work"
    hand_in((SUBMISSIONS / "ex2_3" / "correct_strided.py").read_text())
    assert run("grade", "2.3", str(notebook)).returncode == 0
    hand_in((SUBMISSIONS / "ex2_3" / "wrong_mean_of_accuracies.py").read_text())
    assert run("grade", "2.3", str(notebook)).returncode == 1
    assert run("grade", "2.3", str(notebook), "--seed", "7").returncode == 1  # another grading, not the student's
    entry = kept()["2.3"]
    assert entry["best"] == entry["max"] == 14 and entry["last"] < 14 and entry["checks_run"] == 2, entry
    assert entry["failing"] == ["accuracy equals the single-process accuracy"], entry

    shown = run("progress", str(tmp_path))
    assert shown.returncode == 0
    assert "done 2.3  best 14/14" in shown.stdout and "1.1  not checked yet" in shown.stdout, shown.stdout
    assert "next: start exercise 1.0" in shown.stdout, shown.stdout

    progress_file.write_text("{ not json")  # the student's file, edited by hand: read as nothing, then kept again
    assert "next: start exercise 1.0" in run("progress", str(tmp_path)).stdout
    run("grade", "2.3", str(notebook))
    assert kept()["2.3"]["checks_run"] == 1 and sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [notebook.name, progress_file.name])


def test_hint_shows_the_idea_then_where_to_look_then_how_and_progress_counts_the_steps_taken(tmp_path):
    from conftest import handed_in

    released = ROOT / "exercises" / "02_ddp_basics.ipynb"
    notebook = tmp_path / released.name
    nbformat.write(handed_in(released, {"2.3": (SUBMISSIONS / "ex2_3" / "wrong_mean_of_accuracies.py").read_text()}),
                   notebook)
    steps = [run("hint", "2.3", str(notebook)) for _ in range(4)]
    assert all(s.returncode == 0 for s in steps), steps[0].stderr
    said = [s.stdout for s in steps]
    check = "accuracy equals the single-process accuracy"
    assert f'hint 1 of 3 for "{check}", the idea:' in said[0] and "Read lesson 2, section" in said[0], said[0]
    assert f'hint 2 of 3 for "{check}", where to look:' in said[1], said[1]
    assert f'hint 3 of 3 for "{check}", how to fix it:' in said[2] and "That was the last step" in said[2], said[2]
    assert "hint 3 of 3" in said[3]  # no fourth step: the last one again
    shown = run("progress", str(tmp_path)).stdout
    assert "2.3  best" in shown and "3 hint(s) taken" in shown, shown
    unknown = run("hint", "9.9", str(notebook))
    assert unknown.returncode == 2 and "unknown exercise '9.9'" in unknown.stderr, unknown.stderr
