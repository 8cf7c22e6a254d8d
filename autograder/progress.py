"""The student's progress over the course: every exercise's best score so far, and what to do next.

Every check a student runs (the notebook's check cells, ``python -m autograder grade``) updates a small file of
theirs, ``ddp-course-progress.json``, in the folder of the notebook they work in: it travels with their
notebooks, git ignores it, and they may read, edit or delete it (deleted, it starts again from nothing). It
holds, per exercise: the best score and when it was reached, the last score and when, how many checks were run,
the checks that failed last, the hints of the first of them (hints.py), and the hints taken, by check. It is the
student's own record, never a grade: nbgrader grades the notebook (and may count the hints taken, if the
instructor says so: nbgrader_grading.py).

``progress()`` in a notebook and ``python -m autograder progress [FOLDER]`` show it, lesson by lesson;
``hint(ID)`` and ``python -m autograder hint ID PATH`` show the next step of a hint (``next_hint``).
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import json
import os
import time
from pathlib import Path

from autograder.hints import STEPS, TITLES, step_text

FILE = "ddp-course-progress.json"
LESSONS = {"1": "Lesson 1: data versus model parallelism", "2": "Lesson 2: DistributedDataParallel basics",
           "3": "Lesson 3: synchronized batch norm and sharded state", "4": "Lesson 4: launching jobs with torchrun"}


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M")


def load(folder: Path) -> dict:
    """The exercises recorded in `folder`'s progress file, by id (an unreadable file counts as none)."""
    try:
        kept = json.loads((folder / FILE).read_text())
        return {k: v for k, v in kept.get("exercises", {}).items() if isinstance(v, dict)}
    except (OSError, ValueError, AttributeError):
        return {}


def record(folder: Path, report) -> None:
    """Add one graded check to the progress file in `folder` (one writer at a time; written whole). An exercise
    not started yet (its cell as handed out) is not a check of the student's work: nothing is recorded."""
    if report.not_started:
        return
    folder.mkdir(parents=True, exist_ok=True)
    with _locked(folder):
        done = load(folder)
        before = done.get(report.exercise, {})
        entry = {**before, "last": report.score, "last_on": _now(), "max": report.max_score,
                 "checks_run": int(before.get("checks_run", 0)) + 1,
                 "failing": [c.name for c in report.checks if c.status not in ("passed", "skipped")]}
        if report.score >= float(before.get("best", -1)):
            entry.update(best=report.score, best_on=entry["last_on"])
        first = next((c for c in report.checks if c.status == "failed" and c.hints), None)
        entry["hint"] = {"check": first.name, **first.hints} if first else None
        done[report.exercise] = entry
        _write(folder, done)


def _write(folder: Path, done: dict) -> None:
    """The whole file, written beside it and renamed onto it: never half written."""
    temporary = folder / f".{FILE}.{os.getpid()}"
    temporary.write_text(json.dumps({"exercises": dict(sorted(done.items(), key=lambda kv: _order(kv[0])))},
                                    indent=1) + "\n")
    os.replace(temporary, folder / FILE)


def hints_taken(entry: dict) -> dict[str, int]:
    """Steps of hints taken, by check, as recorded (a hand-edited file gives what it can)."""
    taken = entry.get("hints_taken")
    if not isinstance(taken, dict):
        return {}
    return {str(k): min(max(v, 0), len(STEPS)) for k, v in taken.items() if type(v) is int}


def taken_by_exercise(folder: Path) -> dict[str, int]:
    """Steps of hints taken per exercise (each check's counted up to its three), as the file beside a notebook says."""
    return {i: sum(hints_taken(e).values()) for i, e in load(folder).items() if hints_taken(e)}


def next_hint(folder: Path, exercise_id: str, known: bool = True) -> dict:
    """The next step of the hint for the check of ``exercise_id`` that failed first in its last check, recorded
    as taken: {"step": 1-3, "of": 3, "check", "text", and the hint's fields}, or {"message": why there is none}."""
    if not known:
        return {"message": f"there is no exercise {exercise_id!r}"}
    with _locked(folder) if folder.is_dir() else contextlib.nullcontext():
        done = load(folder)
        entry = done.get(exercise_id)
        if entry is None:
            return {"message": f"run exercise {exercise_id}'s check first: a hint is for the check that failed"}
        hint = entry.get("hint")
        if not isinstance(hint, dict) or not isinstance(hint.get("check"), str):
            failing = entry.get("failing") or []
            return {"message": f"exercise {exercise_id}'s last check gave no hint to take"
                               + (": its failing checks are about finding the cause yourself, or could not be "
                                  "judged (read the report)" if failing else ": every check passed")}
        taken = hints_taken(entry)
        step = min(taken.get(hint["check"], 0) + 1, len(STEPS))
        taken[hint["check"]] = max(step, taken.get(hint["check"], 0))
        entry["hints_taken"] = taken
        _write(folder, done)
    return {**hint, "step": step, "of": len(STEPS), "text": step_text(hint, STEPS[step - 1]),
            "title": TITLES[STEPS[step - 1]]}


@contextlib.contextmanager
def _locked(folder: Path):
    """The folder itself locked (no file of its own left behind): a notebook's check and a command's at once."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _order(exercise_id: str) -> tuple:
    try:
        return tuple(int(part) for part in exercise_id.split("."))
    except ValueError:
        return (99, exercise_id)


def rows(folder: Path, ids: list[str]) -> list[dict]:
    """One row per exercise of the course, in order: its lesson, its id, and what is recorded of it."""
    done = load(folder)
    return [{"lesson": i.split(".")[0], "exercise": i, **done.get(i, {})} for i in ids]


def next_step(table: list[dict]) -> str:
    """What to do next: the first exercise, in the course's order, without full marks."""
    for row in table:
        if "best" not in row:
            return f"next: start exercise {row['exercise']} ({LESSONS.get(row['lesson'], '')})"
        if row["best"] < row.get("max", 0):
            failing = row.get("failing") or []
            still = f"; still failing: {failing[0]}" + (f" and {len(failing) - 1} more" if len(failing) > 1 else "") \
                if failing else ""
            return f"next: finish exercise {row['exercise']}, at {row['best']:g}/{row['max']:g}{still}"
    return "every exercise has full marks: well done"


def to_text(folder: Path, ids: list[str]) -> str:
    table = rows(folder, ids)
    lines, lesson = [], None
    for row in table:
        if row["lesson"] != lesson:
            lesson = row["lesson"]
            done = [r for r in table if r["lesson"] == lesson and "best" in r]
            earned, worth = sum(r["best"] for r in done), sum(r["max"] for r in done)
            lines.append(f"\n{LESSONS.get(lesson, 'Lesson ' + lesson)}"
                         + (f": {earned:g}/{worth:g} points in the exercises checked" if done else ""))
        if "best" in row:
            mark = "done" if row["best"] >= row["max"] else "    "
            lines.append(f"  {mark} {row['exercise']:<4} best {row['best']:g}/{row['max']:g} on {row['best_on']}, "
                         f"last {row['last']:g} on {row['last_on']}, {row['checks_run']} check(s) run"
                         + _taken_words(row))
        else:
            lines.append(f"       {row['exercise']:<4} not checked yet")
    return (f"Your progress (kept in {folder / FILE}; delete it to start again)" + "\n".join(lines)
            + f"\n\n{next_step(table)}")


def _taken_words(row: dict) -> str:
    taken = sum(hints_taken(row).values())
    return f", {taken} hint(s) taken" if taken else ""


def to_html(folder: Path, ids: list[str]) -> str:
    table = rows(folder, ids)
    body = []
    for row in table:
        if "best" in row:
            full = row["best"] >= row["max"]
            cells = (f"{row['best']:g}/{row['max']:g}", row["best_on"], f"{row['last']:g}", str(row["checks_run"]),
                     str(sum(hints_taken(row).values())))
            color = "#1a7f37" if full else "#9a6700"
        else:
            cells, color = ("not checked yet", "", "", "", ""), "#6e7781"
        body.append(f"<tr><td>{html.escape(LESSONS.get(row['lesson'], row['lesson']).split(':')[0])}</td>"
                    f"<td>{html.escape(row['exercise'])}</td>"
                    + "".join(f"<td style='color:{color}'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ("<div class='autograder-progress'><table><thead><tr><th>lesson</th><th>exercise</th><th>best</th>"
            "<th>best on</th><th>last</th><th>checks run</th><th>hints taken</th></tr></thead><tbody>" + "".join(body)
            + f"</tbody></table><p><b>{html.escape(next_step(table))}</b></p>"
            f"<p style='color:#6e7781'>Kept in {html.escape(str(folder / FILE))}: yours to read, or delete to start "
            "again.</p></div>")


class Progress:
    """What ``progress()`` returns in a notebook: shown as a table; its plain text is the text form."""

    def __init__(self, folder: Path, ids: list[str]):
        self.folder, self.ids = folder, ids

    def __repr__(self) -> str:
        return to_text(self.folder, self.ids)

    def _repr_html_(self) -> str:
        return to_html(self.folder, self.ids)
