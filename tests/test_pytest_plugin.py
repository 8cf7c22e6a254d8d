"""The pytest front end, driven through real pytest runs on copies of the student notebook."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.source import magic_id

ROOT = Path(__file__).resolve().parent.parent
RELEASED = ROOT / "exercises" / "02_ddp_basics.ipynb"
SUBMISSIONS = ROOT / "tests" / "submissions" / "ex2_3"


def student_notebook(path: Path, code_2_3: str) -> None:
    """The released notebook with exercise 2.3 answered by `code_2_3`."""
    nb = nbformat.read(RELEASED, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "code" and magic_id(c.source) == "2.3")
    cell.source = "%%exercise 2.3\n" + code_2_3
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def pytest_run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    student_notebook(root / "correct.ipynb", (SUBMISSIONS / "correct_strided.py").read_text())
    student_notebook(root / "wrong.ipynb", (SUBMISSIONS / "wrong_mean_of_accuracies.py").read_text())
    student_notebook(root / ".ipynb_checkpoints" / "wrong-checkpoint.ipynb", "def evaluate(): pass\n")
    plain = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('no exercise here')")])
    nbformat.write(plain, root / "plain.ipynb")
    return root


def ids_of_problem_set_2() -> list[str]:
    from autograder import exercises

    return [i for i in exercises.ids() if i.startswith("2.")]


@pytest.fixture(scope="module")
def graded(course):
    return pytest_run("-v", "-k", "2.3", ".", cwd=course)


def test_correct_exercise_passes(graded):
    assert "correct.ipynb::exercise[2.3] PASSED" in graded.stdout, graded.stdout


def test_wrong_exercise_fails_with_the_report(graded):
    assert graded.returncode == 1
    assert "wrong.ipynb::exercise[2.3] FAILED" in graded.stdout
    assert "✗ accuracy equals the single-process accuracy" in graded.stdout
    others = 2 * (len(ids_of_problem_set_2()) - 1)  # every other exercise of both notebooks
    assert f"1 failed, 1 passed, {others} deselected" in graded.stdout


def test_collects_one_item_per_exercise_cell_and_skips_other_notebooks(course):
    # norecursedirs emptied so that pytest walks into .ipynb_checkpoints: the plugin must skip it itself
    run = pytest_run("--collect-only", "-q", "-o", "norecursedirs=", ".", cwd=course)
    items = [line for line in run.stdout.splitlines() if "::" in line]
    assert items == [f"{name}.ipynb::exercise[{i}]" for name in ("correct", "wrong") for i in ids_of_problem_set_2()], \
        run.stdout
