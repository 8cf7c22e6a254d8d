"""Hints in three steps (autograder/hints.py): every check of every exercise has them, they point to a section
that the lesson has, and the last step says the shape of a fix in words, never the code of an answer."""

from __future__ import annotations

import json
import re

import pytest

from autograder import exercises, hints
from autograder.hints import Hint
from conftest import ROOT

# Exercises whose work is to find the cause from the symptom give no hints (hints.py).
FIND_THE_CAUSE = [i for i in exercises.ids() if exercises.get(i).planted]
HINTED = [i for i in exercises.ids() if i not in FIND_THE_CAUSE]
CODE = re.compile(r"[A-Za-z_][\w.]*\((?!s\))|\w\s*=\s*\w|\[\w+\]")  # a call, an assignment, an index


def headings(lesson: str) -> set[str]:
    nb = json.loads((ROOT / "lessons" / hints.LESSON_FILES[lesson]).read_text())
    return {line.lstrip("#").strip() for c in nb["cells"] if c["cell_type"] == "markdown"
            for line in "".join(c["source"]).splitlines() if line.startswith("#")}


@pytest.mark.parametrize("exercise_id", HINTED)
def test_every_check_has_three_steps_pointing_to_a_section_of_the_lesson(exercise_id):
    lesson = exercise_id.split(".")[0]
    for check in exercises.get(exercise_id).checks:
        if check.hint_for is not None:
            continue  # told by how the launch ended: see the test of runs_to_the_end's hints
        hint = check.hint
        assert isinstance(hint, Hint), f"{exercise_id} {check.name!r} has no hints in steps"
        assert all(len(part) > 20 for part in (hint.idea, hint.where, hint.how)), (exercise_id, check.name)
        where, heading = hint.place(lesson)
        assert heading in headings(where), f"{exercise_id} {check.name!r}: lesson {where} has no section {heading!r}"


@pytest.mark.parametrize("exercise_id", HINTED)
def test_no_step_gives_the_code_of_an_answer(exercise_id):
    for check in exercises.get(exercise_id).checks:
        if isinstance(check.hint, Hint):
            for step in (check.hint.where, check.hint.how):
                assert not CODE.search(step), f"{exercise_id} {check.name!r}: code in a hint: {step!r}"


def test_the_exercises_that_ask_to_find_the_cause_give_no_hints():
    assert FIND_THE_CAUSE
    for exercise_id in FIND_THE_CAUSE:
        assert all(not c.hint and c.hint_for is None for c in exercises.get(exercise_id).checks), exercise_id


def test_a_link_to_a_section_is_the_heading_as_jupyterlab_names_it():
    link = hints.link("2", "7. Saving a checkpoint: once, from rank 0, without `module.`")
    assert link == "../lessons/02_ddp_basics.ipynb#7.-Saving-a-checkpoint:-once,-from-rank-0,-without-module."


def _report_with_a_failed_check(exercise_id: str = "2.2"):
    from autograder.report import CheckResult, Report

    steps = Hint("The idea of it, said plainly here.", "3. `init_process_group` comes first",
                 "Where to look in the code, said plainly.", "How to fix it, said in plain words.").steps("2")
    checks = [CheckResult("a check that holds", "passed", 1, 1),
              CheckResult("a check that failed", "failed", 0, 2, "seen\nHint: ...", hints=steps),
              CheckResult("another that failed", "failed", 0, 2, "seen", hints={**steps, "idea": "other"})]
    return Report(exercise_id, "title", "gloo", [1, 2], checks)


def test_each_hint_asked_for_is_the_next_step_for_the_check_that_failed_first_and_is_counted(tmp_path):
    from autograder import progress

    assert "run exercise 2.2's check first" in progress.next_hint(tmp_path, "2.2")["message"]
    progress.record(tmp_path, _report_with_a_failed_check())
    given = [progress.next_hint(tmp_path, "2.2") for _ in range(4)]
    assert [g["step"] for g in given] == [1, 2, 3, 3] and {g["check"] for g in given} == {"a check that failed"}
    assert given[0]["text"].startswith("The idea of it") and 'lesson 2, section "3. init_process_group' in given[0]["text"]
    assert given[1]["text"] == "Where to look in the code, said plainly." and given[2]["text"].startswith("How to fix")
    assert progress.taken_by_exercise(tmp_path) == {"2.2": 3}
    assert "3 hint(s) taken" in progress.to_text(tmp_path, exercises.ids())
    progress.record(tmp_path, _report_with_a_failed_check())  # checked again: the steps taken stay taken
    assert progress.next_hint(tmp_path, "2.2")["step"] == 3
    shown = hints.Shown("2.2", given[0], 'hint("2.2")')
    assert "../lessons/02_ddp_basics.ipynb#3.-init_process_group-comes-first" in shown._repr_html_()


def test_hints_taken_cost_points_under_nbgrader_only_when_the_instructor_says_so_and_never_add_any(tmp_path):
    from autograder import progress
    from autograder.nbgrader_grading import hints_taken_beside
    from autograder.notebook import CheckOutcome

    report = _report_with_a_failed_check()
    free = CheckOutcome("2.2", report, hints_taken=2)
    assert free.earned == report.score and "Hints taken for exercise 2.2: 2 step(s)." in free._repr_html_()
    assert CheckOutcome("2.2", report, hints_taken=2, hint_cost=0.25).earned == report.score - 0.5
    assert CheckOutcome("2.2", report, hints_taken=3, hint_cost=5).earned == 0
    (tmp_path / progress.FILE).write_text(json.dumps({"exercises": {"2.2": {"hints_taken": {"x": -50, "y": 99}}}}))
    assert hints_taken_beside(tmp_path) == {"2.2": 3}  # a hand-edited file: no negative steps, at most three
    assert hints_taken_beside(None) == {}
