"""What nbgrader needs: check cells graded by the sandboxed engine, never by the student's kernel.

``nbgrader autograde`` normally runs the submitted notebook in a kernel and takes each check
cell's output as its grade. A student's notebook can fool that (a cell that rebinds ``check``
makes every check cell print nothing, which nbgrader scores as full credit), and the kernel
runs the student's code as the instructor, beside the gradebook. So the course's
nbgrader_config.py replaces nbgrader's Execute step with ``GradeInSandbox``:

- no kernel runs at all: nothing the student's notebook does outside its exercise cells
  matters, and their code runs only inside the grader's sandbox;
- each check cell's source is the instructor's (nbgrader restored it from the gradebook,
  hidden tests included); it is read, never run: its ``name = literal`` lines and its
  ``check(...)`` call say which exercise to grade and how, and ``autograder.engine.grade``
  grades the submitted exercise cell of that id;
- the cell's output becomes what a check cell shows in the notebook: the report, and the points
  earned as the cell's value, which nbgrader reads as partial credit;
- one student's notebook is graded by its own sandboxed rank hosts, as their own notebook's checks
  are; the next student's gets new ones, which nothing the last one did can reach;
- a failure of the grader itself costs only the check cell it happened in.

Without a sandbox on the machine autograding stops with a message, unless the instructor
allows it: ``c.GradeInSandbox.allow_without_sandbox = True`` in nbgrader_config.py.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool, Float, Unicode

from autograder.source import MAGIC, UsageError, as_notebook, magic_id


class GradeInSandbox(Preprocessor):
    # nbconvert skips a preprocessor that is not enabled, and nbgrader then gives a check cell with
    # no output full marks: this one is always on.
    enabled = Bool(True)
    allow_without_sandbox = Bool(
        False, help="Grade even where the sandbox cannot run (the submission then runs as you, beside the gradebook)."
    ).tag(config=True)

    graded_store = Unicode(
        "", help="A folder of check cells already graded (`python -m autograder class` fills it): a cell found "
                 "there, graded from the same code by the same grader, is not graded again."
    ).tag(config=True)

    hint_cost = Float(
        0.0, help="Points taken off an exercise for each step of a hint the student took, as their progress file "
                  "beside the notebook records it (their own file: a nudge, not a control)."
    ).tag(config=True)

    def preprocess(self, nb, resources):
        """Grade every check cell of one student's notebook, with one sandboxed rank host for all of them."""
        cells = exercise_cells(nb)
        taken = hints_taken_beside(resources.get("metadata", {}).get("path"))
        checks = [c for c in nb.cells if c.cell_type == "code" and _is_check_cell(c)]
        kept = {id(c): self.kept_output(c.source, cells, taken) for c in checks}
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        with self.session() if None in kept.values() else contextlib.nullcontext():  # no host for nothing to grade
            for cell in checks:
                cell.outputs = [kept[id(cell)] or self.graded_output(cell.source, cells, taken)]
        return nb, resources

    @contextlib.contextmanager
    def session(self):
        """Rank hosts and a folder for one student's notebook, which nothing graded before it touched."""
        from autograder import engine

        with tempfile.TemporaryDirectory(prefix="autograder-nbgrader-") as tmp, engine.Hosts(self._mode()) as hosts:
            self.folder, self.hosts = Path(tmp), hosts
            try:
                hosts.get()  # whether the sandbox runs is known before any of this student's code does
            except engine.SandboxRequired as exc:
                raise RuntimeError(f"{exc}. Install bubblewrap, or allow grading without it with "
                                   "c.GradeInSandbox.allow_without_sandbox = True in nbgrader_config.py") from None
            except Exception:
                pass  # each check cell's grading starts a host again, and says what failed
            yield

    def _mode(self) -> str:
        return "auto" if self.allow_without_sandbox else "required"

    def kept_output(self, source: str, cells: dict[str, str], taken: dict[str, int]):
        """The check cell's output as the graded store keeps it, or None (no store, or not graded there)."""
        from autograder.class_grading import Store

        return Store(Path(self.graded_store)).get(Store.key(source, cells, taken)) if self.graded_store else None

    def graded_output(self, source: str, cells: dict[str, str], taken: dict[str, int]) -> dict:
        from nbformat.v4 import new_output

        from autograder.notebook import CheckOutcome

        self.grader_failed = False  # set by grade: the output says the grader itself failed, not the code
        call = check_call(source)
        if call is None:
            outcome = CheckOutcome("?", message="this check cell does not say which exercise to check")
        else:
            exercise_id, options = call
            outcome = self.grade(exercise_id, cells, options.get("seed", 0), options.get("world_sizes"))
            outcome.hints_taken, outcome.hint_cost = taken.get(exercise_id, 0), self.hint_cost
        return new_output("execute_result", {"text/plain": repr(outcome), "text/html": outcome._repr_html_()},
                          execution_count=None)

    def grade(self, exercise_id: str, cells: dict[str, str], seed: int, world_sizes):
        """The exercise's cell graded, as a notebook with the cells of the exercises it also runs (1.5 sets
        its predictions beside the student's own 1.1-1.4), as the check in the student's notebook does."""
        from autograder import engine, exercises
        from autograder.notebook import CheckOutcome

        if exercise_id not in cells:
            return CheckOutcome(exercise_id, message=f"no exercise cell: none starts with `{MAGIC} {exercise_id}`")
        known = exercises.get(exercise_id)
        ids = [exercise_id, *(i for i in (known.uses if known else ()) if i in cells)]
        path = self.folder / f"exercise_{exercise_id.replace('.', '_')}.ipynb"
        path.write_text(as_notebook([cells[i] for i in ids]))
        try:
            report = engine.grade(exercise_id, path, world_sizes, seed=seed, hosts=self.hosts)
        except UsageError as exc:
            return CheckOutcome(exercise_id, message=str(exc))
        except Exception as exc:  # the grader's own failure costs this cell, never the notebook's other cells
            self.log.error("exercise %s: the grader failed: %s", exercise_id, exc)
            self.grader_failed = True
            return CheckOutcome(exercise_id, message=f"the grader failed ({type(exc).__name__}): {str(exc)[:300]}")
        self.log.info("exercise %s: %s/%s", exercise_id, report.score, report.max_score)
        return CheckOutcome(exercise_id, report)


def hints_taken_beside(folder) -> dict[str, int]:
    """Steps of hints taken per exercise, from the progress file submitted beside the notebook (none: {})."""
    from autograder import progress

    return progress.taken_by_exercise(Path(folder)) if folder else {}


def exercise_cells(nb) -> dict[str, str]:
    """The notebook's exercise cells by exercise id (the cells that start with `%%exercise ID`)."""
    return {magic_id(c.source): c.source for c in nb.cells if c.cell_type == "code" and magic_id(c.source)}


def _is_check_cell(cell) -> bool:
    """A locked grade cell that nbgrader knows (its source was restored from the gradebook)."""
    meta = cell.metadata.get("nbgrader", {})
    return (bool(meta.get("grade")) and not meta.get("solution") and bool(meta.get("locked"))
            and bool(meta.get("grade_id")) and "check(" in cell.source)


def check_call(source: str) -> tuple[str, dict] | None:
    """The last ``check(ID, seed=..., world_sizes=...)`` in a check cell, with names bound to literals above it."""
    import ast

    from autograder.source import parse

    names, found = {}, None
    try:
        body = parse(source).body
    except SyntaxError:
        return None
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = _value(node.value, names)
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
              and isinstance(node.value.func, ast.Name) and node.value.func.id == "check"):
            args = [_value(a, names) for a in node.value.args]
            options = {k.arg: _value(k.value, names) for k in node.value.keywords if k.arg}
            if args and isinstance(args[0], str):
                found = (args[0], {**dict(zip(("seed", "world_sizes"), args[1:])), **options})
    return found


def _value(node, names: dict):
    import ast

    if isinstance(node, ast.Name):
        return names.get(node.id)
    try:
        return ast.literal_eval(node)
    except ValueError:
        return None


def feedback_template_dirs() -> list[str]:
    """Where nbconvert finds the feedback page: nbgrader's own templates, then the course's, whose
    `course_feedback` names each check cell after its exercise."""
    import nbgrader

    return [str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"),
            str(Path(__file__).parent / "feedback_template")]
