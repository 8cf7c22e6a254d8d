"""A class graded one notebook at a time (`nbgrader autograde`) and several at once (`python -m autograder class`).
Prints figures; asserts nothing.

    python benchmarks/class_grading.py [--problem-sets ps1,ps2] [--students 6] [--jobs 2,3]

For each problem set, a class of mixed quality is handed in (the solutions, one exercise wrong, a hanging
exercise, the released notebook untouched, repeated up to the size asked), every notebook different from the
others (a comment names its student, so that no two are graded as one). The same class is then graded twice
from the same start: serially by nbgrader, and by the class command with each number of jobs; the gradebooks
must agree. Printed: seconds per notebook each way, and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

SOURCES = {"ps1": "01_parallelism.ipynb", "ps2": "02_ddp_basics.ipynb", "ps3": "03_syncbn_sharding.ipynb",
           "ps4": "04_torchrun.ipynb"}
# One wrong submission per problem set, and a hanging one where the course has one, from its negative controls
# (a file of tests/submissions/exL_N/, or one of its mistakes.py edits).
WRONG = {"ps1": ("1.2", "wrong_gather_to_rank0"), "ps2": ("2.3", "wrong_mean_of_accuracies"),
         "ps3": ("3.7", "wrong_whole_tensors"), "ps4": ("4.2", "wrong_no_resume")}
HANGING = {"ps2": ("2.3", "wrong_reduce_on_rank0_only")}


def make_class(root: Path, assignment: str, students: int) -> Path:
    import nbformat
    from conftest import SUBMISSIONS, edits, handed_in
    from test_nbgrader_flow import handed_in_class

    def answer(exercise_id: str, name: str) -> str:
        folder = SUBMISSIONS / f"ex{exercise_id.replace('.', '_')}"
        path = folder / f"{name}.py"
        return (path if path.exists() else edits.write(folder, name, root.parent)).read_text()

    def class_of(released, solutions, correct):
        kinds = [(kind, {**correct, chosen[assignment][0]: answer(*chosen[assignment])})
                 for kind, chosen in (("wrong", WRONG), ("hanging", HANGING)) if assignment in chosen]
        kinds = [("correct", correct), *kinds, ("empty", None)]
        made = {}
        for k in range(students):
            kind, answers = kinds[k % len(kinds)]
            nb = (handed_in(released, {i: f"# student {k}\n{code}" for i, code in answers.items()})
                  if answers is not None else nbformat.read(released, as_version=4))
            if answers is None:
                nb.cells.append(nbformat.v4.new_markdown_cell(f"student {k}"))
            made[f"s{k:02d}_{kind}"] = nb
        return made

    return handed_in_class(root, ROOT / "solutions" / SOURCES[assignment], assignment, class_of)


def timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - start


def grades(course: Path, assignment: str) -> dict:
    from nbgrader.api import Gradebook

    found = {}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for submission in gradebook.assignment_submissions(assignment):
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    found[(submission.student_id, notebook.name, grade.name)] = grade.auto_score
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem-sets", default="ps1,ps2")
    parser.add_argument("--students", type=int, default=6)
    parser.add_argument("--jobs", default="2,3")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="class-benchmark-") as tmp:
        for assignment in args.problem_sets.split(","):
            start = make_class(Path(tmp) / assignment / "start", assignment, args.students)
            serial = Path(tmp) / assignment / "serial"
            shutil.copytree(start, serial)
            seconds = timed([sys.executable, "-m", "nbgrader", "autograde", assignment], serial)
            print(f"{assignment}, {args.students} notebooks: nbgrader autograde {seconds:.1f} s "
                  f"({seconds / args.students:.1f} s a notebook)", flush=True)
            for jobs in (int(j) for j in args.jobs.split(",")):
                course = Path(tmp) / assignment / f"jobs{jobs}"
                shutil.copytree(start, course)
                ours = timed([sys.executable, "-m", "autograder", "class", assignment, "--jobs", str(jobs)], course)
                same = grades(course, assignment) == grades(serial, assignment)
                print(f"  class --jobs {jobs}: {ours:.1f} s ({ours / args.students:.1f} s a notebook), "
                      f"{seconds / ours:.2f}x; same grades as nbgrader: {same}", flush=True)


if __name__ == "__main__":
    main()
