"""A whole class graded at once: `python -m autograder class ps2 --course DIR [--jobs N]`.

``nbgrader autograde`` grades one notebook after another. Here the grading itself, the slow part, runs in
N grader processes at once, and nbgrader then records it:

1. **Grade, in parallel.** Each student's notebook of the assignment is graded as ``GradeInSandbox`` grades
   it under ``nbgrader autograde``: every check cell of the instructor's (from the gradebook, hidden tests
   included) against the student's exercise cells, each notebook with sandboxed rank hosts of its own. The
   grader processes import torch once and never run a student's code themselves; every rank runs in its
   notebook's sandbox, started after the last notebook's was taken down. Each graded check cell's output is
   kept in the store, ``DIR/.autograder/ASSIGNMENT/``, under a digest of everything it depends on (the check
   cell, the exercise cells it grades, the grader's own code). A class graded again, after an interruption or
   a crash, grades only what is not kept yet; identical notebooks are graded once.
2. **Record, as nbgrader does.** ``nbgrader autograde ASSIGNMENT`` itself then runs, its ``GradeInSandbox``
   taking each check cell's output from the store (and grading any cell that is not there), so the gradebook,
   the autograded notebooks and the feedback are nbgrader's own, exactly as a serial autograde makes them.

The store is the instructor's: the sandbox shows the ranks none of the course directory.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STORE = ".autograder"
ATTEMPTS = 2  # a notebook whose grader process died is graded again once; after that nbgrader grades it itself


class Store:
    """Graded check cells, one JSON file each, named by the digest of what the output depends on."""

    def __init__(self, folder: Path):
        self.folder = folder

    @staticmethod
    def key(check_source: str, cells: dict[str, str], taken: dict[str, int]) -> str:
        """The digest of the grader's code, the check cell, every exercise cell of the notebook (a check may
        run the cells of other exercises beside its own: 1.5 does) and the hints the student took. Nothing here
        imports torch, so that recording a graded class does not."""
        text = json.dumps([_fingerprint(), check_source, cells, taken], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str):
        """The output kept under `key`, as nbgrader's cells hold outputs (a NotebookNode), or None."""
        import nbformat

        try:
            return nbformat.from_dict(json.loads((self.folder / f"{key}.json").read_text()))
        except (OSError, ValueError):
            return None

    def put(self, key: str, output: dict):
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f".{key}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps(output))
        os.replace(temporary, self.folder / f"{key}.json")  # whole or absent, whatever stops this process


@functools.cache
def _fingerprint() -> str:
    """The grader's own code (autograder, ranks, ddpcourse): a store graded by other code is not reused."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for package in ("autograder", "ranks", "ddpcourse"):
        for path in sorted((root / package).rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class Notebook:
    """One student's notebook of the assignment, as nbgrader finds it in submitted/."""

    student: str
    path: Path

    @property
    def label(self) -> str:
        return f"{self.student} {self.path.stem}"


def submissions(course: Path, assignment: str, force: bool) -> list[Notebook]:
    """The notebooks `nbgrader autograde ASSIGNMENT` would grade: every student's, less those already autograded
    (unless `force`)."""
    found = []
    for folder in sorted((course / "submitted").glob(f"*/{assignment}")):
        student = folder.parent.name
        if not force and (course / "autograded" / student / assignment).exists():
            continue
        found += [Notebook(student, path) for path in sorted(folder.glob("*.ipynb"))]
    return found


def check_cells(course: Path, assignment: str) -> dict[str, list[str]]:
    """Notebook name -> the source of each of its check cells, as the gradebook holds them (hidden tests in)."""
    from nbgrader.api import Gradebook

    from autograder.nbgrader_grading import check_call

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        found = {}
        for notebook in gradebook.find_assignment(assignment).notebooks:
            found[notebook.name] = [cell.source for cell in notebook.source_cells
                                    if cell.locked and "check(" in cell.source and check_call(cell.source)]
        return found


def grade_notebook(config_file: str, store_folder: str, path: str, checks: list[str]) -> tuple[float, float, int]:
    """In a grader process: grade every check cell of one notebook that the store lacks, and keep each output.
    Returns the points found in its outputs, their maximum, and how many cells were graded here."""
    import nbformat
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.nbgrader_grading import GradeInSandbox, exercise_cells, hints_taken_beside

    config = PyFileConfigLoader(Path(config_file).name, path=str(Path(config_file).parent)).load_config()
    grader = GradeInSandbox(config=config)
    store = Store(Path(store_folder))
    cells = exercise_cells(nbformat.read(path, as_version=4))
    taken = hints_taken_beside(Path(path).parent)
    keys = [Store.key(source, cells, taken) for source in checks]
    outputs = [store.get(key) for key in keys]
    graded = sum(o is None for o in outputs)
    if graded:
        with grader.session():
            for k, (source, key) in enumerate(zip(checks, keys)):
                if outputs[k] is None:
                    outputs[k] = grader.graded_output(source, cells, taken)
                    if not grader.grader_failed:  # a failure of the grader's own is not kept: graded again later
                        store.put(key, outputs[k])
    return sum(_score(o) for o in outputs), sum(_worth(source) for source in checks), graded


def _score(output: dict) -> float:
    """The points nbgrader reads from a check cell's output: its value, a number."""
    try:
        return float(output.get("data", {}).get("text/plain", "0"))
    except ValueError:
        return 0.0


def _worth(check_source: str) -> float:
    from autograder import exercises
    from autograder.nbgrader_grading import check_call

    call = check_call(check_source)
    known = exercises.get(call[0]) if call else None
    return known.points if known else 0.0


@contextlib.contextmanager
def _pool(jobs: int, context):
    """Grader processes. On Ctrl-C (which reaches them too) or SIGTERM, nothing more is started and each is told
    to stop (SIGINT: its grading unwinds, stopping its ranks) before this returns; what was graded is kept."""
    pool = concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_warm)
    try:
        yield pool
    except BaseException:
        processes = list((pool._processes or {}).values())  # noqa: SLF001 (the executor keeps its processes here)
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            if process.is_alive():
                os.kill(process.pid, signal.SIGINT)
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
        raise
    else:
        pool.shutdown(wait=True)


def _all_kept(store: Store, path: Path, checks: list[str]) -> bool:
    """Whether every check cell of this notebook is graded in the store already (a class graded again)."""
    import nbformat

    from autograder.nbgrader_grading import exercise_cells, hints_taken_beside

    try:
        cells = exercise_cells(nbformat.read(path, as_version=4))
    except Exception:
        return False  # unreadable: the grader process says why
    taken = hints_taken_beside(path.parent)
    return all(store.get(Store.key(source, cells, taken)) is not None for source in checks)


def _warm():
    """A grader process starts with what grading imports, once for all its notebooks; Ctrl-C or SIGTERM stops its
    grading through the code that stops its ranks."""
    import torch  # noqa: F401

    from autograder import engine  # noqa: F401

    signal.signal(signal.SIGINT, _stop_once)
    signal.signal(signal.SIGTERM, _stop_once)


def _stop_once(signum, frame):
    """Unwind the grading once (its `finally`s stop the ranks); the signals that follow change nothing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


class Progress:
    def __init__(self, total: int, say):
        self.total, self.done, self.started, self.say = total, 0, time.monotonic(), say

    def one(self, line: str):
        self.done += 1
        elapsed = time.monotonic() - self.started
        left = elapsed / self.done * (self.total - self.done)
        eta = f"; about {_duration(left)} left" if self.done < self.total else f"; {_duration(elapsed)} in all"
        self.say(f"[{self.done}/{self.total}] {line}{eta}")


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def grade_class(course: Path, assignment: str, jobs: int, force: bool = False, slurm: bool = False, say=print) -> int:
    """Grade every submitted notebook of `assignment` with `jobs` graders at once, then record the grades with
    nbgrader autograde. Returns nbgrader's exit status."""
    course = course.resolve()
    config_file = course / "nbgrader_config.py"
    if not (course / "gradebook.db").exists() or not config_file.exists():
        print(f"autograder: {course} is not an nbgrader course directory with this course's nbgrader_config.py and "
              "a gradebook: copy nbgrader_config.py there and run nbgrader generate_assignment first", file=sys.stderr)
        return 2
    try:
        checks = check_cells(course, assignment)
    except Exception as exc:  # nbgrader's MissingEntry: no such assignment in the gradebook
        print(f"autograder: the gradebook of {course} has no assignment {assignment!r} ({type(exc).__name__}): "
              "run nbgrader generate_assignment for it first", file=sys.stderr)
        return 2
    store = course / STORE / assignment
    todo = [n for n in submissions(course, assignment, force) if n.path.stem in checks
            and not _all_kept(Store(store), n.path, checks[n.path.stem])]
    where = "as a Slurm job array" if slurm else "here"
    say(f"{len(todo)} notebook(s) of {assignment} to grade {where}, {jobs} at a time; graded cells are kept in {store}")
    try:
        graded = 0
        if todo and slurm:
            graded = _grade_on_slurm(todo, checks, str(config_file), store, jobs, assignment, say)
            todo = [n for n in todo if not _all_kept(Store(store), n.path, checks[n.path.stem])]
            if todo:
                say(f"{len(todo)} notebook(s) not graded by the job array: graded here")
        if todo:
            graded += _grade_all(todo, checks, str(config_file), str(store), jobs, Progress(len(todo), say))
    except KeyboardInterrupt:
        say("interrupted: what was graded is kept; the same command goes on from there")
        return 130
    say(f"recording with nbgrader autograde {assignment} ({graded} check cell(s) graded now, the rest kept)")
    command = [sys.executable, "-m", "nbgrader", "autograde", assignment, f"--GradeInSandbox.graded_store={store}",
               *(["--force"] if force else [])]
    done = subprocess.run(command, cwd=course, capture_output=True, text=True)
    if done.returncode != 0:
        say(f"nbgrader autograde failed ({done.returncode}):\n{done.stderr[-3000:]}")
    else:
        say(f"done: the grades are in {course / 'gradebook.db'}, the graded notebooks in {course / 'autograded'}")
    return done.returncode


def _grade_all(todo: list[Notebook], checks: dict, config_file: str, store: str, jobs: int, progress: Progress) -> int:
    """Every notebook through a pool of grader processes; a notebook whose process died is tried again in a new
    pool. Ctrl-C stops the graders (each stops its ranks); what was graded is kept."""
    graded, attempts, left = 0, {n: 0 for n in todo}, list(todo)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: nothing of this process is shared
    while left:
        retry = []
        with _pool(jobs, context) as pool:
            running = {pool.submit(grade_notebook, config_file, store, str(n.path), checks[n.path.stem]): n
                       for n in left}
            for future in concurrent.futures.as_completed(running):
                notebook = running[future]
                attempts[notebook] += 1
                try:
                    score, most, count = future.result()
                except concurrent.futures.process.BrokenProcessPool:
                    if attempts[notebook] < ATTEMPTS:
                        retry.append(notebook)
                    else:
                        progress.one(f"{notebook.label}: its grader died twice; nbgrader autograde grades it itself")
                    continue
                except Exception as exc:  # the grader's own failure: nbgrader grades this notebook itself
                    progress.one(f"{notebook.label}: not graded here ({type(exc).__name__}: {exc}); "
                                 "nbgrader autograde grades it itself")
                    continue
                graded += count
                progress.one(f"{notebook.label}: {score:g}/{most:g} points")
        left = retry
    return graded


def _grade_on_slurm(todo: list[Notebook], checks: dict, config_file: str, store: Path, jobs: int, assignment: str,
                    say) -> int:
    """Every notebook as one task of a Slurm job array (at most `jobs` at once), on whichever nodes Slurm gives;
    the course directory must be where the nodes see it. Progress from each task's line in the store. Returns
    how many cells were graded; a task that failed leaves its notebook to be graded here."""
    store.mkdir(parents=True, exist_ok=True)
    manifest = store / f"array-{os.getpid()}.json"
    done = store / f"array-{os.getpid()}"
    done.mkdir()
    manifest.write_text(json.dumps({"config": config_file, "store": str(store), "done": str(done),
                                    "notebooks": [[str(n.path), checks[n.path.stem]] for n in todo]}))
    command = ["sbatch", "--parsable", "--wait", f"--array=0-{len(todo) - 1}%{jobs}", "--ntasks=1",
               f"--job-name=autograde-{assignment}", f"--output={store}/slurm-%A_%a.out",
               f"--wrap={sys.executable} -m autograder.class_grading {manifest} $SLURM_ARRAY_TASK_ID"]
    array = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = array.stdout.readline().strip().split(";")[0]
    progress, told = Progress(len(todo), say), set()
    try:
        while True:
            finished = array.poll() is not None
            for line in sorted(done.glob("*.json")):
                if line.name not in told:
                    told.add(line.name)
                    progress.one(json.loads(line.read_text())["line"])
            if finished:
                break
            time.sleep(0.5)
    except BaseException:
        subprocess.run(["scancel", job], capture_output=True)
        array.kill()
        raise
    if array.returncode != 0:
        say(f"the job array {job} ended with {array.returncode}: {array.stderr.read().strip()[:500]}")
    graded = sum(json.loads(p.read_text())["graded"] for p in done.glob("*.json"))
    for index in range(len(todo)):  # the log of a task that finished says nothing: only failures' logs are kept
        if (done / f"{index}.json").exists():
            (store / f"slurm-{job}_{index}.out").unlink(missing_ok=True)
    kept = sorted(store.glob(f"slurm-{job}_*.out"))
    if kept:
        say(f"the logs of the tasks that did not finish: {', '.join(str(p) for p in kept)}")
    shutil.rmtree(done)
    manifest.unlink()
    return graded


def _array_task(manifest: str, index: int):
    """One task of the job array: grade one notebook into the store, then leave a line for the progress."""
    plan = json.loads(Path(manifest).read_text())
    path, checks = plan["notebooks"][index]
    _warm()
    score, most, graded = grade_notebook(plan["config"], plan["store"], path, checks)
    notebook = Notebook(Path(path).parent.parent.name, Path(path))
    line = f"{notebook.label}: {score:g}/{most:g} points (node {os.environ.get('SLURMD_NODENAME', '?')})"
    result = Path(plan["done"]) / f"{index}.json"
    result.with_suffix(".tmp").write_text(json.dumps({"line": line, "graded": graded}))
    os.replace(result.with_suffix(".tmp"), result)


if __name__ == "__main__":
    _array_task(sys.argv[1], int(sys.argv[2]))
