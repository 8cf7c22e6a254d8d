"""pytest front end: ``pytest exercises/02_ddp_basics.ipynb`` grades every exercise cell in it.

A notebook is collected when it holds at least one ``%%exercise`` cell and is not one of
Jupyter's checkpoint copies; each exercise cell becomes one test item, ``exercise[2.3]``,
graded in this process by ``autograder.engine.grade``. An item passes when every check
passes; a failure shows the report. Other notebooks are left alone, so the plugin, which
pytest loads in every run, stays out of the way of ordinary test suites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CHECKPOINTS = ".ipynb_checkpoints"


def exercise_ids(path: Path) -> list[str]:
    """The exercises a notebook has cells for, in cell order; none if it is no notebook."""
    from autograder.source import MAGIC, code_cells, magic_id

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    if MAGIC not in text:  # most notebooks: no parse needed
        return []
    try:
        ids = [magic_id(source) for source in code_cells(text)]
    except Exception:  # not a notebook, or one nobody could read: not ours to collect, nor to stop collection
        return []
    return list(dict.fromkeys(i for i in ids if i))


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".ipynb" and CHECKPOINTS not in file_path.parts and exercise_ids(file_path):
        return ExerciseNotebook.from_parent(parent, path=file_path)
    return None


class ExerciseNotebook(pytest.File):
    def collect(self):
        for exercise_id in exercise_ids(self.path):
            yield ExerciseItem.from_parent(self, name=f"exercise[{exercise_id}]", exercise_id=exercise_id)


class ExerciseFailed(Exception):
    def __init__(self, report):
        super().__init__(report.headline())
        self.report = report


class ExerciseItem(pytest.Item):
    def __init__(self, *, exercise_id: str, **kwargs):
        super().__init__(**kwargs)
        self.exercise_id = exercise_id

    def runtest(self):
        from autograder.engine import grade  # imports torch: only when a notebook is graded

        report = grade(self.exercise_id, self.path)
        self.user_properties.append(("score", f"{report.score:g}/{report.max_score:g}"))
        if not report.all_passed:
            raise ExerciseFailed(report)

    def repr_failure(self, excinfo, style=None):
        from autograder.source import UsageError

        if isinstance(excinfo.value, ExerciseFailed):
            return excinfo.value.report.to_text()
        if isinstance(excinfo.value, UsageError):
            return f"autograder: {excinfo.value}"
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"exercise {self.exercise_id}"
