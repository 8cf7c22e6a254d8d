"""Make the student notebooks (exercises/) from the nbgrader sources (solutions/).

    python scripts/release.py [--out DIR] [--sync-points]

nbgrader needs a course directory, so one is made in a temporary directory, with this
repository's nbgrader_config.py; each notebook is an assignment of its own, named by its number
(solutions/01_parallelism.ipynb is "ps1"); `nbgrader generate_assignment` clears the solutions and
the hidden tests, and the released notebooks are copied to DIR (default: exercises/).
Never edit exercises/ by hand: tests/test_release.py checks that it matches this script's output.

--sync-points first sets each check cell's points in solutions/ to what its exercise is
worth in the autograder (`autograder.exercises.get(id).points`).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions"
CONFIG = ROOT / "nbgrader_config.py"
CHECK_CALL = re.compile(r"""check\(\s*["']([^"']+)["']""")


def check_cells(nb) -> list[tuple[str, dict]]:
    """(exercise id, cell) for each graded cell that calls check(...)."""
    found = []
    for cell in nb.cells:
        match = CHECK_CALL.search(cell.source)
        if cell.metadata.get("nbgrader", {}).get("grade") and match:
            found.append((match.group(1), cell))
    return found


def sync_points(notebook: Path) -> None:
    from autograder import exercises  # imports torch: only when asked

    nb = nbformat.read(notebook, as_version=4)
    for exercise_id, cell in check_cells(nb):
        exercise = exercises.get(exercise_id)
        if exercise is None:
            print(f"{notebook.name}: exercise {exercise_id} is not in the autograder; points left as they are")
            continue
        cell.metadata["nbgrader"]["points"] = exercise.points
    nbformat.write(nb, notebook)


def tool_environment(**extra: str) -> dict[str, str]:
    """The environment for nbgrader: it runs `alembic` from PATH, which a venv not activated lacks."""
    scripts = str(Path(sys.executable).parent)
    return dict(os.environ, PATH=os.pathsep.join([scripts, os.environ.get("PATH", "")]), **extra)


def assignment(notebook: Path) -> str:
    """nbgrader's name for a problem set: "ps2" for solutions/02_ddp_basics.ipynb."""
    return f"ps{int(notebook.name.split('_', 1)[0])}"


def release(out: Path) -> list[Path]:
    written = []
    with tempfile.TemporaryDirectory(prefix="release-") as tmp:
        course = Path(tmp)
        shutil.copy(CONFIG, course)
        for notebook in sorted(SOLUTIONS.glob("*.ipynb")):
            name = assignment(notebook)
            (course / "source" / name).mkdir(parents=True)
            shutil.copy(notebook, course / "source" / name)
            done = subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", name, "--force"],
                                  cwd=course, capture_output=True, text=True, env=tool_environment())
            if done.returncode != 0:
                raise SystemExit(f"nbgrader generate_assignment {name} failed:\n{done.stdout}{done.stderr}")
            out.mkdir(parents=True, exist_ok=True)
            written.append(Path(shutil.copy(course / "release" / name / notebook.name, out)))
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=ROOT / "exercises", help="where the student notebooks go")
    p.add_argument("--sync-points", action="store_true", help="set check cells' points from the autograder first")
    args = p.parse_args(argv)
    if args.sync_points:
        for notebook in sorted(SOLUTIONS.glob("*.ipynb")):
            sync_points(notebook)
    for path in release(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
