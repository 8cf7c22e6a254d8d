"""The student's progress over the course: every exercise's best score so far, and what to do next.

Every check a student runs (the notebook's check cells, ``python -m autograder grade``) updates a small file of
theirs, ``ddp-course-progress.json``, in the folder of the notebook they work in: it travels with their
notebooks, git ignores it, and they may read, edit or delete it (deleted, it starts again from nothing). It
holds, per exercise: the best score and when it was reached, the last score and when, how many checks were run,
and the checks that failed last. It is the student's own record, never a grade: nbgrader grades the notebook.

``progress()`` in a notebook and ``python -m autograder progress [FOLDER]`` show it, lesson by lesson.
"""

from __future__ import annotations

import contextlib
import fcntl
import html
import json
import os
import time
from pathlib import Path

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
        done[report.exercise] = entry
        temporary = folder / f".{FILE}.{os.getpid()}"
        temporary.write_text(json.dumps({"exercises": dict(sorted(done.items(), key=lambda kv: _order(kv[0])))},
                                        indent=1) + "\n")
        os.replace(temporary, folder / FILE)


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
                         f"last {row['last']:g} on {row['last_on']}, {row['checks_run']} check(s) run")
        else:
            lines.append(f"       {row['exercise']:<4} not checked yet")
    return (f"Your progress (kept in {folder / FILE}; delete it to start again)" + "\n".join(lines)
            + f"\n\n{next_step(table)}")


def to_html(folder: Path, ids: list[str]) -> str:
    table = rows(folder, ids)
    body = []
    for row in table:
        if "best" in row:
            full = row["best"] >= row["max"]
            cells = (f"{row['best']:g}/{row['max']:g}", row["best_on"], f"{row['last']:g}", str(row["checks_run"]))
            color = "#1a7f37" if full else "#9a6700"
        else:
            cells, color = ("not checked yet", "", "", ""), "#6e7781"
        body.append(f"<tr><td>{html.escape(LESSONS.get(row['lesson'], row['lesson']).split(':')[0])}</td>"
                    f"<td>{html.escape(row['exercise'])}</td>"
                    + "".join(f"<td style='color:{color}'>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ("<div class='autograder-progress'><table><thead><tr><th>lesson</th><th>exercise</th><th>best</th>"
            "<th>best on</th><th>last</th><th>checks run</th></tr></thead><tbody>" + "".join(body)
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
