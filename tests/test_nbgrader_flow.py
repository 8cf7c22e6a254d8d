"""nbgrader end to end: release, autograde a small class, feedback, export.

The class: `correct` hands in the solutions; `wrong` averages per-rank accuracies in 2.3;
`hanging` calls 2.3's all_reduce on rank 0 only; `empty` hands in the released notebook;
`cheater` hands in the released notebook with a cell that rebinds `check` to do nothing, which
scores full marks wherever a check cell's output is taken from the student's kernel.
Every nbgrader process, and so every kernel, grader and rank under it, gets its temporary
and runtime directories inside this test's directory: a process left behind names that
directory on its command line or works inside it.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder import exercises, sandbox
from autograder.source import magic_id
from conftest import edits, handed_in, script, slurm_missing

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "solutions" / "02_ddp_basics.ipynb"
NOTEBOOK = SOURCE.stem
ASSIGNMENT = "ps2"
SUBMISSIONS = ROOT / "tests" / "submissions" / "ex2_3"
IDS = [magic_id(c.source) for c in nbformat.read(SOURCE, as_version=4).cells
       if c.cell_type == "code" and magic_id(c.source)]


def solved(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if "### BEGIN SOLUTION" not in line
                     and "### END SOLUTION" not in line)


def with_cell(nb, index: int, source: str):
    nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    return nb


def processes_in(folder: Path) -> list[str]:
    """Live processes that name `folder` on their command line or work inside it."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            args = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if str(folder) in args or cwd.startswith(str(folder)):
            found.append(f"{proc.name} {args}")
    return found


def nbgrader_in(root: Path):
    """`nbgrader ARGS` run in the course `root`, its temporary and runtime directories inside it."""
    env = script("release").tool_environment(TMPDIR=str(root / "tmp"), JUPYTER_RUNTIME_DIR=str(root / "runtime"))
    (root / "tmp").mkdir(parents=True, exist_ok=True)

    def nbgrader(*args):
        done = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=root, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return nbgrader, env


def handed_in_class(root: Path, source: Path, assignment: str, class_of) -> Path:
    """Release `source` as `assignment` in the course `root`, and hand in `class_of(released, solutions, correct
    answers)` (student -> notebook)."""
    nbgrader, _ = nbgrader_in(root)
    shutil.copy(ROOT / "nbgrader_config.py", root)
    if sandbox.probe()[0] is None:  # say so, as an instructor must, or autograding refuses
        with open(root / "nbgrader_config.py", "a") as f:
            f.write("\nc.GradeInSandbox.allow_without_sandbox = True\n")
    (root / "source" / assignment).mkdir(parents=True)
    shutil.copy(source, root / "source" / assignment)
    nbgrader("generate_assignment", assignment)
    released = root / "release" / assignment / source.name

    solutions = nbformat.read(source, as_version=4)
    correct = {magic_id(c.source): solved(c.source.split("\n", 1)[1])
               for c in solutions.cells if c.cell_type == "code" and magic_id(c.source)}
    for cell in solutions.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    for student, nb in class_of(released, solutions, correct).items():
        folder = root / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / source.name)
    return root


def graded_class(root: Path, source: Path, assignment: str, class_of, prepare=None) -> Path:
    """The class handed in (handed_in_class), then `prepare(root)` if given, autograded, given feedback and
    exported, all inside `root`."""
    handed_in_class(root, source, assignment, class_of)
    if prepare is not None:
        prepare(root)
    nbgrader, _ = nbgrader_in(root)
    nbgrader("autograde", assignment)
    nbgrader("generate_feedback", assignment)
    nbgrader("export")
    return root


def check_cell_scores(root: Path, notebook: str, assignment: str, students) -> dict:
    """student -> exercise id -> (score, max score) of its check cell."""
    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student in students:
            grades = gb.find_submission_notebook(notebook, assignment, student).grades
            found[student] = {g.name.removeprefix("check_").replace("_", "."): (g.score, g.max_score) for g in grades}
    return found


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    def class_of(released, solutions, correct):
        return {
            "correct": solutions,
            "wrong": handed_in(released, {**correct, "2.3": (SUBMISSIONS / "wrong_mean_of_accuracies.py").read_text()}),
            "hanging": handed_in(released, {**correct, "2.3": (SUBMISSIONS / "wrong_reduce_on_rank0_only.py").read_text()}),
            "empty": nbformat.read(released, as_version=4),
            "cheater": with_cell(nbformat.read(released, as_version=4), 2, "check = lambda *args, **kwargs: None"),
            "hinted": solutions,
        }

    def hints_at_a_cost(root):  # a student who took two steps of 2.3's hints, each costing half a point
        (root / "submitted" / "hinted" / ASSIGNMENT / "ddp-course-progress.json").write_text(json.dumps(
            {"exercises": {"2.3": {"hints_taken": {"accuracy equals the single-process accuracy": 2}}}}))
        with open(root / "nbgrader_config.py", "a") as f:
            f.write("\nc.GradeInSandbox.hint_cost = 0.5\n")
    return graded_class(tmp_path_factory.mktemp("course"), SOURCE, ASSIGNMENT, class_of, hints_at_a_cost)


@pytest.fixture(scope="module")
def scores(course):
    return check_cell_scores(course, NOTEBOOK, ASSIGNMENT, ("correct", "wrong", "hanging", "empty", "cheater", "hinted"))


def test_hints_a_student_took_are_shown_and_cost_what_the_instructor_set(scores, course):
    score, top = scores["hinted"]["2.3"]
    assert score == top - 1.0, scores["hinted"]  # two steps at half a point
    assert all(s == t for i, (s, t) in scores["hinted"].items() if i != "2.3")
    page = (course / "feedback" / "hinted" / ASSIGNMENT / f"{NOTEBOOK}.html").read_text()
    assert "Hints taken for exercise 2.3: 2 step(s): they cost 1 point(s)" in page


def test_check_cells_are_worth_the_exercise_points(scores):
    assert {i: m for i, (_, m) in scores["empty"].items()} == {i: exercises.get(i).points for i in IDS}


def test_correct_gets_full_marks(scores):
    assert all(score == top for score, top in scores["correct"].values()), scores["correct"]


def test_wrong_gets_partial_credit_on_the_wrong_exercise(scores):
    score, top = scores["wrong"]["2.3"]
    assert 0 < score < top
    assert all(s == t for i, (s, t) in scores["wrong"].items() if i != "2.3")


def test_hanging_loses_that_exercise_only(scores):
    assert scores["hanging"]["2.3"][0] == 0
    assert all(s == t for i, (s, t) in scores["hanging"].items() if i != "2.3")


def test_empty_gets_zero(scores):
    assert all(score == 0 for score, _ in scores["empty"].values()), scores["empty"]


def test_rebinding_check_in_the_notebook_earns_nothing(scores, course):
    assert all(score == 0 for score, _ in scores["cheater"].values()), scores["cheater"]
    nb = nbformat.read(course / "autograded" / "cheater" / ASSIGNMENT / SOURCE.name, as_version=4)
    check_2_3 = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_2_3")
    assert "not implemented yet" in check_2_3.outputs[0]["data"]["text/html"]


def test_hidden_tests_ran_at_autograde(course):
    nb = nbformat.read(course / "autograded" / "correct" / ASSIGNMENT / SOURCE.name, as_version=4)
    check_2_3 = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_2_3")
    assert "seed = 7" in check_2_3.source


def test_feedback_and_grades_csv(course):
    for student in ("correct", "wrong", "hanging", "empty", "cheater"):
        assert (course / "feedback" / student / ASSIGNMENT / f"{NOTEBOOK}.html").is_file()
    page = (course / "feedback" / "wrong" / ASSIGNMENT / f"{NOTEBOOK}.html").read_text()
    assert "Test cell" not in page  # each check cell is listed under its exercise
    assert all(f'<a href="#check_{ex.replace(".", "_")}">Exercise {ex}</a>' in page for ex in IDS)
    assert "autograder-report" in page and "<svg" in page  # the report, with the picture of the run
    assert "HIDDEN TESTS" not in page and "autograding checks again" not in page  # graded, not shown
    # small enough to mail or open on a phone: no 117 kB stylesheet of Bootstrap's for a few panels
    assert "Bootstrap v3" not in page and len(page.encode()) < 250_000, len(page.encode())
    with open(course / "grades.csv") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"correct", "wrong", "hanging", "empty", "cheater", "hinted"}
    assert float(rows["correct"]["score"]) == float(rows["correct"]["max_score"])
    assert float(rows["empty"]["score"]) == 0


@pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="reads /proc")
def test_nothing_left_running(course):
    assert processes_in(course) == []


# Problem sets graded with partial credit on the exercises a student got wrong, and full marks elsewhere:
# notebook -> (assignment, {exercise: control handed in for it}, points that control loses)
PROBLEM_SETS = {
    "01_parallelism.ipynb": ("ps1", {"1.3": ("wrong_loss_not_divided", 4), "1.4": ("wrong_no_f", 4)}),
    "03_syncbn_sharding.ipynb": ("ps3", {"3.1": ("wrong_plain_all_reduce", 3), "3.5": ("wrong_model_only", 3)}),
    "04_torchrun.ipynb": ("ps4", {"4.0": ("wrong_restart_count_as_epoch", 1), "4.2": ("wrong_every_rank_writes", 1)}),
}


@pytest.fixture(scope="module", params=sorted(PROBLEM_SETS))
def problem_set(request, tmp_path_factory):
    source = ROOT / "solutions" / request.param
    assignment, mistakes = PROBLEM_SETS[request.param]
    root = tmp_path_factory.mktemp(assignment)

    def class_of(released, solutions, correct):
        # One student, right everywhere but the exercises in `mistakes` (ps2's class above also hands in
        # the solutions notebook itself; grading each lesson's twice would only cost minutes).
        wrong = {ex: _control(ex, name, root) for ex, (name, _) in mistakes.items()}
        return {"mixed": handed_in(released, {**correct, **wrong})}

    graded_class(root, source, assignment, class_of)
    return source, mistakes, check_cell_scores(root, source.stem, assignment, ("mixed",)), root


def _control(exercise_id: str, name: str, scratch: Path) -> str:
    """A negative control's source: a file of its own, or an edit of a correct solution."""
    folder = ROOT / "tests" / "submissions" / f"ex{exercise_id.replace('.', '_')}"
    whole = folder / f"{name}.py"
    return whole.read_text() if whole.exists() else edits.write(folder, name, scratch).read_text()


def test_a_class_gets_partial_credit_where_it_erred(problem_set):
    source, mistakes, scores, _ = problem_set
    ids = [magic_id(c.source) for c in nbformat.read(source, as_version=4).cells
           if c.cell_type == "code" and magic_id(c.source)]
    assert set(scores["mixed"]) == set(ids)
    for ex in ids:
        worth = exercises.get(ex).points
        lost = mistakes[ex][1] if ex in mistakes else 0  # the check that names the mistake, and only it
        if ex == "4.6" and slurm_missing():  # its Slurm runs only where the grader is root: judged nothing
            lost = worth
        assert scores["mixed"][ex] == (worth - lost, worth)


def test_1_5_sets_its_predictions_beside_the_students_own_cells_under_autograde_too(problem_set):
    source, _, _, root = problem_set
    if source.name != "01_parallelism.ipynb":
        pytest.skip("1.5 is in problem set 1")
    graded = nbformat.read(root / "autograded" / "mixed" / "ps1" / source.name, as_version=4)
    check = next(c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "check_1_5")
    shown = "".join(o.get("data", {}).get("text/html", "") for o in check.outputs)
    assert "your predictions" in shown.lower() or "your own code" in shown.lower(), shown[:2000]
    assert "did not run" not in shown, shown[:2000]  # the student's 1.1-1.4 ran beside 1.5, as in the notebook

