"""exercises/ is what scripts/release.py makes from solutions/, and the check cells' points are the autograder's."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder import exercises
from autograder.source import magic_id
from conftest import script

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


release = script("release")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    out = tmp_path_factory.mktemp("released")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "release.py"), "--out", str(out)], check=True,
                   capture_output=True)
    return out


def test_exercises_are_the_release_of_solutions(released):
    made = sorted(p.name for p in released.glob("*.ipynb"))
    assert made == sorted(p.name for p in (ROOT / "exercises").glob("*.ipynb"))
    for name in made:
        # nbgrader's checksums hash cell sources and metadata only, so whole notebooks compare equal
        assert nbformat.read(released / name, as_version=4) == nbformat.read(ROOT / "exercises" / name, as_version=4), (
            f"exercises/{name} is out of date: run `python scripts/release.py`")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_check_cell_points_are_the_exercise_points(path):
    nb = nbformat.read(path, as_version=4)
    checked = release.check_cells(nb)
    assert checked, f"{path.name} has no check cells"
    for exercise_id, cell in checked:
        exercise = exercises.get(exercise_id)
        assert exercise is not None, f"{path.name} checks exercise {exercise_id}, which the autograder does not have"
        assert cell.metadata["nbgrader"]["points"] == exercise.points, (
            f"check cell of {exercise_id}: run `python scripts/release.py --sync-points`")


@pytest.mark.parametrize("path", SOLUTIONS, ids=lambda p: p.name)
def test_every_exercise_cell_has_a_check_cell(path):
    nb = nbformat.read(path, as_version=4)
    cells = [magic_id(c.source) for c in nb.cells if c.cell_type == "code" and magic_id(c.source)]
    assert cells == [exercise_id for exercise_id, _ in release.check_cells(nb)]
