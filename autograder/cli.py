"""Command line: `python -m autograder list`, `grade EXERCISE PATH`, `progress [FOLDER]` (a student's best scores),
`hint EXERCISE PATH` (the next step of a hint) and `class ASSIGNMENT --course DIR` (a whole class into nbgrader's
gradebook)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys

from autograder import exercises, source
from autograder.source import UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, like every other usage error
        print(f"autograder: {message}", file=sys.stderr)
        raise SystemExit(2)


def _sizes(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"world sizes are integers separated by commas, not {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m autograder", description="Grade the course's DDP exercises on real processes.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="print the exercise ids, one a line")
    serve = sub.add_parser("serve", help="grade requests read from stdin, one JSON line each (the notebook's grader)")
    serve.add_argument("--root", required=True, help="the work directory the notebook made for this grader")
    g = sub.add_parser("grade", help="grade an exercise, or every exercise in a notebook (grade all PATH)")
    g.add_argument("exercise", help="an exercise id, e.g. 2.2 (`list` shows them), or all: every exercise in PATH")
    g.add_argument("path", help="a .py file, or a notebook whose cell starts with `%%%%exercise ID`")
    g.add_argument("--world-sizes", type=_sizes, default=None, help="comma-separated, e.g. 1,2,3")
    g.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    g.add_argument("--seed", type=int, default=0, help="seed of the data the harness gives the code")
    g.add_argument("--timeout", type=float, default=None, help="seconds allowed per launch")
    g.add_argument("--backend", choices=("gloo", "nccl"), default=None, help="force a backend")
    g.add_argument("--sandbox", choices=("auto", "required", "off"), default=None,
                   help="run the submission in the sandbox: where it works (auto, the default), or refuse "
                        "to grade without it (required), or never (off)")
    g.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    pr = sub.add_parser("progress", help="your best score of every exercise so far, and what to do next")
    pr.add_argument("folder", nargs="?", default="exercises", help="the folder of your notebooks (default: exercises)")
    h = sub.add_parser("hint", help="check an exercise again, then show the next step of the hint for the check "
                                    "that failed first: the idea, where to look, how to fix it")
    h.add_argument("exercise", help="an exercise id, e.g. 2.2")
    h.add_argument("path", help="your notebook (or .py file) with that exercise; your progress file is beside it")
    k = sub.add_parser("class", help="autograde every submission of an nbgrader assignment, several at once, "
                                     "into the course's gradebook")
    k.add_argument("assignment", help="the assignment, e.g. ps2")
    k.add_argument("--course", default=".", help="the nbgrader course directory (default: here)")
    k.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="notebooks graded at once (default: one "
                                                                           "per CPU)")
    k.add_argument("--force", action="store_true", help="grade again the students nbgrader has autograded already")
    k.add_argument("--slurm", action="store_true", help="grade as a Slurm job array (the course directory where "
                                                          "every node sees it), then record here")
    return p


def main(argv: list[str] | None = None) -> int:
    # A stopped grader still cleans up: SIGTERM unwinds like Ctrl-C, through every `finally`
    # that stops the ranks and removes the work directory.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        return _main(argv)
    except KeyboardInterrupt:
        print("autograder: interrupted; the ranks were stopped", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `... | head` closed our stdout: nothing left to say
        sys.stderr.close()
        return 1


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def _main(argv: list[str] | None) -> int:
    args = parser().parse_args(argv)
    if args.command == "list":
        print("\n".join(exercises.ids()))
        return 0
    if args.command == "serve":
        from pathlib import Path

        from autograder.server import serve

        return serve(Path(args.root))
    if args.command == "progress":
        from pathlib import Path

        from autograder import progress

        print(progress.to_text(Path(args.folder).resolve(), exercises.ids()))
        return 0
    if args.command == "hint":
        return _hint(args)
    if args.command == "class":
        from pathlib import Path

        from autograder.class_grading import grade_class

        if args.jobs < 1:
            print("autograder: --jobs must be 1 or more", file=sys.stderr)
            return 2
        return grade_class(Path(args.course), args.assignment, args.jobs, args.force, args.slurm,
                           say=lambda line: print(line, flush=True))
    from autograder.engine import grade_each  # imports torch: only when grading

    progress = (lambda line: None) if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))
    try:
        ids = source.exercises_in(args.path, exercises.ids()) if args.exercise == "all" else [args.exercise]
        reports = grade_each(ids, args.path, args.world_sizes, seed=args.seed, timeout=args.timeout,
                             backend=args.backend, sandbox_setting=args.sandbox, progress=progress)
    except UsageError as exc:
        print(f"autograder: {exc}", file=sys.stderr)
        return 2
    _note_progress(args, reports)
    if args.json:
        print(reports[0].to_json() if len(reports) == 1 else json.dumps(_course_summary(reports)))
    else:
        print("\n\n".join(r.to_text() for r in reports))
        if len(reports) > 1:
            total = _course_summary(reports)
            print(f"\nTotal: {total['score']:g}/{total['max_score']:g} points over {len(reports)} exercises")
    return 0 if all(r.all_passed for r in reports) else 1


def _note_progress(args, reports):
    """A student's own check of their notebook counts in their progress file, beside it (progress.py); not a grading
    on other data (--seed), nor one of a .py file outside a notebook folder."""
    from pathlib import Path

    from autograder import progress

    path = Path(args.path)
    if args.seed != 0 or path.suffix != ".ipynb":
        return
    for report in reports:
        try:
            progress.record(path.resolve().parent, report)
        except OSError:
            pass


def _hint(args) -> int:
    """Grade the exercise as it is now (so that "where to look" names today's lines), note it in the progress file
    beside PATH, and print the next step of its hint."""
    from pathlib import Path

    from autograder import progress
    from autograder.engine import grade_each
    from autograder.hints import Shown

    if args.exercise not in exercises.ids():
        print(f"autograder: unknown exercise {args.exercise!r}; `python -m autograder list` shows them", file=sys.stderr)
        return 2
    try:
        report, = grade_each([args.exercise], args.path, None, progress=lambda line: None)
    except UsageError as exc:
        print(f"autograder: {exc}", file=sys.stderr)
        return 2
    folder = Path(args.path).resolve().parent
    try:
        progress.record(folder, report)
        given = progress.next_hint(folder, args.exercise)
    except OSError as exc:
        print(f"autograder: the progress file beside {args.path} could not be written ({exc.strerror})", file=sys.stderr)
        return 1
    print(report.headline())
    print(repr(Shown(args.exercise, given, f"python -m autograder hint {args.exercise} {args.path}")))
    return 0


def _course_summary(reports) -> dict:
    return {
        "score": round(sum(r.score for r in reports), 4),
        "max_score": round(sum(r.max_score for r in reports), 4),
        "exercises": [r.to_dict() for r in reports],
    }
