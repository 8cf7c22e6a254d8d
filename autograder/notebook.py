"""The notebook front end: the ``%%exercise`` cell magic and ``check``, the check cells' helper.

An exercise cell starts with ``%%exercise 2.3``. Running it remembers the cell's source
under that id; a function exercise also runs in the notebook, so the student can try the
function, while a whole script (2.2) only runs when checked.

``check("2.3")`` writes the remembered source to a temporary file and has it graded by the
kernel's warm grader (server.py: ``python -m autograder serve``), a separate process, never the
kernel itself. ``%load_ext autograder`` starts it, and it gets ready (torch imported, a rank host
started) while the student reads and writes, so that the first check costs what any later one does:

- the kernel does not fork ranks (a fork of a kernel, with its threads and event loop, is fragile);
- what the ranks print stays out of the cell. nbgrader gives a test cell with *any* stderr
  output zero points, so ``check`` writes nothing to stderr, whatever happens;
- a crash or a hang of the student's code cannot take the kernel with it.

The value ``check`` returns shows the report as HTML. Its plain-text form is the report's
score, the same number the command line and nbgrader show: nbgrader reads a float in a test
cell's result as partial credit.
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.report import Report
from autograder.source import MAGIC, as_notebook

if TYPE_CHECKING:
    from autograder.server import WarmGrader

# Under nbgrader's 300 s cell limit (nbgrader_config.py), so that a check cell always answers.
GRADE_LIMIT = 240.0

_cells: dict[str, str] = {}  # exercise id -> source of its cell, as last run in this kernel
_grader: WarmGrader | None = None  # started by %load_ext autograder; dies with the kernel


def register(shell) -> None:
    def magic(line: str, cell: str) -> None:
        exercise_magic(shell, line, cell)

    shell.register_magic_function(magic, magic_kind="cell", magic_name="exercise")
    _warm_grader().warm_up()


def exercise_magic(shell, line: str, cell: str) -> None:
    """``%%exercise ID``: remember the cell for ``check(ID)``; run it if it defines a function."""
    from autograder import exercises  # imports torch: only once a cell asks for it

    exercise_id = line.strip()
    ex = exercises.get(exercise_id)
    if ex is None:
        known = ", ".join(exercises.ids())
        print(f"autograder: unknown exercise {exercise_id!r}: the first line must be `{MAGIC} ID`, "
              f"ID one of {known}")
        return
    _cells[ex.id] = cell
    if exercises.views_near(ex.id):  # a lesson graded in a view of its own: have its host ready for the check
        _warm_grader().warm_up(ex.id)
    if ex.kind == "script":
        print(f"Exercise {ex.id} is a whole script: it is not run here. Run the check cell below to run it "
              "on several processes, as torchrun would.")
        return
    shell.run_cell(cell)


@dataclass
class CheckOutcome:
    """What a check cell shows: the report, or why there is none."""

    exercise: str
    report: Report | None = None
    message: str = ""  # why there is no report
    detail: str = ""  # what the grader said, when it gave no report
    hints_taken: int = 0  # under nbgrader: steps of hints the student took for this exercise (their progress file)
    hint_cost: float = 0.0  # points each step costs (GradeInSandbox.hint_cost; none by default)

    @property
    def earned(self) -> float:
        """The report's score (see Report.score), less what the hints taken cost; nothing without a report."""
        if self.report is None:
            return 0.0
        return round(max(self.report.score - self.hints_taken * self.hint_cost, 0.0), 2)

    def hints_line(self) -> str:
        if not self.hints_taken:
            return ""
        cost = (f": they cost {self.hints_taken * self.hint_cost:g} point(s), so this exercise earns "
                f"{self.earned:g}/{self.report.max_score:g}") if self.hint_cost and self.report else ""
        return f"Hints taken for exercise {self.exercise}: {self.hints_taken} step(s){cost}."

    def __repr__(self) -> str:
        return repr(float(self.earned))

    def _repr_html_(self) -> str:
        if self.report is None:
            detail = f"<pre style='white-space:pre-wrap'>{html.escape(self.detail)}</pre>" if self.detail else ""
            return (f"<div class='autograder-report'><p style='font-weight:bold;color:#cf222e'>"
                    f"Exercise {html.escape(self.exercise)}: {html.escape(self.message)}</p>{detail}</div>")
        line = self.hints_line()
        shown = f"<p style='color:#9a6700'>{html.escape(line)}</p>" if line else ""
        return self.report._repr_html_() + shown


def check(exercise_id: str, seed: int = 0, world_sizes: list[int] | None = None) -> CheckOutcome:
    """Grade the exercise cell last run in this kernel for ``exercise_id``."""
    code = _cells.get(exercise_id)
    if code is None:
        return CheckOutcome(exercise_id, message=f"run the exercise cell first: the cell whose first line is "
                                                f"`{MAGIC} {exercise_id}`, then run this check again.")
    from autograder.server import kernel_prefix

    # Named for this kernel: if it is killed mid-check, its grader removes this too (server.py).
    with tempfile.TemporaryDirectory(prefix=f"{kernel_prefix(os.getpid())}cell-") as tmp:
        path = Path(tmp) / f"exercise_{exercise_id.replace('.', '_')}.ipynb"
        path.write_text(_as_notebook(exercise_id))
        request = {"exercise": exercise_id, "path": str(path), "seed": seed, "world_sizes": world_sizes}
        try:
            answer, problem = _warm_grader().ask(request, GRADE_LIMIT)
        except KeyboardInterrupt:  # the stop button: the grader and its ranks are stopped (WarmGrader.ask)
            _warm_grader().start_in_background()  # so that the next check does not wait for a new one
            return CheckOutcome(exercise_id, message="stopped with the stop button, and every rank with it. "
                                                     "Run this check again when you are ready.")
    if answer is None:
        return CheckOutcome(exercise_id, message="the grader stopped without a report:", detail=problem)
    if "report" in answer:
        report = Report.from_dict(answer["report"])
        _note_progress(report, seed)
        return CheckOutcome(exercise_id, report)
    if "usage_error" in answer:
        return CheckOutcome(exercise_id, message=answer["usage_error"])
    return CheckOutcome(exercise_id, message="the grader failed:", detail=answer.get("crash", ""))


def _note_progress(report: Report, seed: int):
    """The student's progress file, beside the notebook (the kernel works in its folder), gets this check; never
    under nbgrader's hidden re-checks (another seed), and never at the cost of the check's own answer."""
    if seed != 0:
        return
    from autograder import progress as kept

    try:
        kept.record(Path.cwd(), report)
    except Exception:  # a read-only folder, a full disk: the check still answers, with nothing on stderr
        pass


def progress():
    """Your best score of every exercise so far, lesson by lesson, and what to do next (autograder/progress.py)."""
    from autograder import exercises
    from autograder import progress as kept

    return kept.Progress(Path.cwd(), exercises.ids())


def hint(exercise_id: str):
    """The next step of the hint for the check of ``exercise_id`` that failed first when you last ran its check: the
    idea (and the lesson's section), then where to look in your code, then how to fix it (autograder/hints.py)."""
    from autograder import exercises
    from autograder import progress as kept
    from autograder.hints import Shown

    exercise_id = str(exercise_id)
    try:
        given = kept.next_hint(Path.cwd(), exercise_id, known=exercise_id in exercises.ids())
    except OSError as exc:  # a read-only folder: said in the cell, never on stderr
        given = {"message": f"your progress file could not be read or written ({exc.strerror})"}
    return Shown(exercise_id, given, f'hint("{exercise_id}")')


def _as_notebook(exercise_id: str) -> str:
    """The exercise's cell as last run, and those of the exercises it also runs (1.5 runs 1.1-1.4), as a
    notebook for the grader; the magic line keeps line numbers as in the cell."""
    from autograder import exercises

    known = exercises.get(exercise_id)
    ids = [exercise_id, *(i for i in (known.uses if known else ()) if i in _cells)]
    return as_notebook([f"{MAGIC} {i}\n{_cells[i]}" for i in ids])


def _warm_grader() -> WarmGrader:
    global _grader
    if _grader is None:
        from autograder.server import WarmGrader

        _grader = WarmGrader()
    return _grader
