"""The graded exercises: one file each, holding its checks and what they compare with.

To see what an exercise verifies, open its file and read ``EXERCISE.checks``. What the ranks run
for it, its harness, is ``ranks/exercises/`` under the same file name, inside the sandbox; what the
two share, the exercise's inputs, is ``ddpcourse/given/``.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:  # `python -m autograder list` must not wait for torch
    from autograder.checks import Check
    from autograder.launch import Layout


@dataclass
class Exercise:
    id: str
    title: str
    kind: str  # "function": the module is imported in every rank and its harness (ranks/exercises/)
    # calls `entry`; "script": run as torchrun would; "answers": a concept check, read, never run (quiz.py)
    checks: list[Check]
    entry: str | tuple[str, ...] | None = None  # the name(s) the student's cell must define (functions, or ANSWERS)
    params: Callable[[int], dict] = lambda seed: {}  # what the harness is given (data seeds), by seed
    # What the checks compare with (expected results), by seed: computed by the grader after the
    # ranks have ended, never handed to them.
    expected: Callable[[int], dict] = lambda seed: {}
    work: Callable | None = None  # runs -> None, or why nothing of the exercise's work was seen
    world_sizes: tuple[int, ...] = (1, 2, 3)  # launched in this order
    # The harness hands the student CPU tensors (lesson 1's collectives by hand, the quizzes...): graded
    # with gloo even where every rank could have a GPU, since nccl moves only GPU tensors.
    on_cpu: bool = False
    # Script exercises of lesson 4: launched under the real torchrun (jobs.py), one launch per job, in order.
    jobs: tuple = ()
    # Script exercises whose launch commands the student writes in the cell (4.3): the cell's code -> its
    # jobs, read without running it; raises nodes.CommandError when they cannot run as written.
    jobs_of: Callable[[str], tuple] | None = None
    exported: tuple[str, ...] = ()  # files in a job's working directory read back after it (a snapshot)
    layout: Callable[[int], Layout] | None = None  # world size -> nodes layout; default: one node
    timeout: float = 20.0  # seconds per launch
    quiet: float = 2.0  # seconds every running rank waits, with no progress anywhere, before it is a deadlock
    # Imported by the grader before ranks fork, so each rank need not import them again.
    # DDP's constructor imports torch._dynamo (about 2 s): every exercise that builds DDP lists it.
    warm_imports: tuple[str, ...] = ()
    # The part of the run the report draws, rank by rank: a pair of harness markers (the last
    # window between them), or None for the whole run after the ranks joined.
    timeline_between: tuple[str, str] | None = None
    # Whose run that drawing shows: the student's code, or (1.5, 3.6) the course's own, which the harness runs
    # to measure what the student predicted.
    drawn_as: str = "Your run"
    # "Find and fix" exercises: each planted bug, as the names of the checks its symptom fails.
    planted: tuple[tuple[str, ...], ...] = ()
    # Other exercises whose cells, where the submission has them, run with this one in one more launch
    # of this world size after the graded ones (1.5 measures the student's own 1.1-1.4 code); what that
    # launch records is Runs.own, beside the graded worlds, never among them.
    uses: tuple[str, ...] = ()
    uses_world_size: int = 3
    # A check earns its points in proportion to the world sizes at which it was judged and held. Not where
    # the launches are not one per world size: the jobs of lesson 4 (set below), a chain of launches (3.5).
    credit_per_world: bool = True
    points: float = field(init=False)

    def __post_init__(self):
        if self.jobs:
            self.world_sizes = tuple(dict.fromkeys(job.world_size for job in self.jobs))
            self.credit_per_world = False
        if self.kind == "function" and self.world_sizes != (1,):
            from autograder.checks import runs_to_the_end

            self.checks = [runs_to_the_end("the code runs to the end on every rank at every world size", 1),
                           *self.checks]
        self.points = sum(c.points for c in self.checks)
        unknown = {name for symptom in self.planted for name in symptom} - {c.name for c in self.checks}
        assert not unknown, f"exercise {self.id}: planted bugs name no check of it: {sorted(unknown)}"

    def tally(self, results: list) -> str:
        """How many planted bugs are fixed, as the report's first line; "" for other exercises."""
        if not self.planted:
            return ""
        status = {r.name: r.status for r in results}
        fixed = sum(all(status.get(name) == "passed" for name in symptom) for symptom in self.planted)
        unknown = sum(not any(status.get(name) == "failed" for name in symptom) for symptom in self.planted) - fixed
        left = len(self.planted) - fixed - unknown
        return (f"Planted bugs fixed: {fixed} of {len(self.planted)}."
                + (f" {unknown} could not be judged: a job did not finish (see below)." if unknown else "")
                + (" The failing checks below are the symptoms of those left." if left else ""))

    def same_result(self, status: str, message: str, backend: str) -> list:
        """Every check with one status and message (GPU-only ones skipped on CPUs): nothing was judged."""
        from autograder.report import SKIPPED_ON_CPU

        return [c.result("skipped", SKIPPED_ON_CPU) if c.gpu_only and backend != "nccl" else c.result(status, message)
                for c in self.checks]


MODULES = {"1.0": "ex1_0", "1.1": "ex1_1", "1.2": "ex1_2", "1.3": "ex1_3", "1.4": "ex1_4", "1.5": "ex1_5", "2.0": "ex2_0", "2.1": "ex2_1", "2.2": "ex2_2", "2.3": "ex2_3", "2.4": "ex2_4", "2.5": "ex2_5", "2.6": "ex2_6", "2.7": "ex2_7", "3.0": "ex3_0", "3.1": "ex3_1", "3.2": "ex3_2", "3.3": "ex3_3", "3.4": "ex3_4", "3.5": "ex3_5", "3.6": "ex3_6", "3.7": "ex3_7", "3.8": "ex3_8", "4.0": "ex4_0", "4.1": "ex4_1", "4.2": "ex4_2", "4.3": "ex4_3", "4.4": "ex4_4", "4.5": "ex4_5", "4.6": "ex4_6"}


# Concept checks: read from the cell's text, never run (quiz.py), so no rank host is needed for them.
CONCEPT_CHECKS = ("1.0", "2.0", "3.0", "4.0")
# Modules the ranks of an exercise cannot import, the course's own answer to it: the sandbox of the rank
# host that grades it shows no file of theirs (sandbox.py). Known before the exercise's module is imported,
# so that its host starts while the grader imports torch.
HIDDEN = {"3.1": ("ddpcourse.syncbn",)}


def ids() -> list[str]:
    return list(MODULES)


def kind(exercise_id: str) -> str | None:
    """"answers" for a concept check, without importing it; else what the exercise's module says (None: no such exercise)."""
    if exercise_id in CONCEPT_CHECKS:
        return "answers"
    exercise = get(exercise_id)
    return exercise.kind if exercise else None


def hidden(exercise_id: str) -> tuple[str, ...]:
    return HIDDEN.get(exercise_id, ())


def views_near(exercise_id: str) -> list[tuple[str, ...]]:
    """The views of the course (``hidden``) that the exercises of this one's lesson are graded in, beyond
    the whole course: their hosts can start while the student works on the lesson."""
    lesson = exercise_id.split(".")[0]
    return sorted({view for other, view in HIDDEN.items() if other.split(".")[0] == lesson})


def warm_imports(exercise_ids) -> set[str]:
    """What the rank host imports before forking, for every one of those exercises (unknown ids: nothing)."""
    return {m for i in exercise_ids if get(i) for m in get(i).warm_imports}


@functools.cache
def get(exercise_id: str) -> Exercise | None:
    """The exercise, importing only its own module."""
    if exercise_id not in MODULES:
        return None
    exercise = importlib.import_module(f"autograder.exercises.{MODULES[exercise_id]}").EXERCISE
    assert (exercise.kind == "answers") == (exercise_id in CONCEPT_CHECKS), exercise_id
    return exercise
