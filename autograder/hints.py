"""Hints in three steps for a check that failed: the idea, where to look, how to fix it.

- the idea: what the check is about, and the lesson's section that teaches it (a link in the notebook);
- where to look: the part of the student's code to read, followed by the lines of it that the ranks actually ran
  for this check (from the trace: "torch.save at exercise cell line 14, in train, on ranks 0, 1");
- how: the shape of the fix, in words, never the code of an answer.

The report shows the idea under each failed check. ``hint("2.3")`` in a notebook, or ``python -m autograder hint
2.3 PATH``, shows the next step for the check that failed first (progress.py records which steps were taken).
Checks of the exercises whose work is to find the cause from the symptom (2.5, 4.4) give no hints.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

LESSON_FILES = {"1": "01_parallelism.ipynb", "2": "02_ddp_basics.ipynb", "3": "03_syncbn_sharding.ipynb",
                "4": "04_torchrun.ipynb"}
STEPS = ("idea", "where", "how")
TITLES = {"idea": "the idea", "where": "where to look", "how": "how to fix it"}
# What a trace event's caller line is a call of, for "where to look".
_CALLS = {"save": "torch.save", "load": "torch.load", "set_epoch": "set_epoch", "ddp": "DDP",
          "init_process_group": "init_process_group", "destroy_process_group": "destroy_process_group",
          "enter": "blocking call", "collective": "collective"}
_LINE = re.compile(r"(?:exercise cell|[\w.-]+\.py) line \d+(?:, in [\w<>.]+)?")
# The course's own modules: a line of theirs (FSDP's all-gathers in ddpcourse's model) is not the student's.
_COURSE_FILES = {p.name for p in (Path(__file__).resolve().parents[1] / "ddpcourse").glob("*.py")}


@dataclass(frozen=True)
class Hint:
    idea: str  # what the check is about, in a sentence or two
    section: str  # a heading of the exercise's lesson, as written there; "L:heading" for lesson L's
    where: str  # which part of the student's code to read
    how: str  # the shape of the fix, in words
    # Trace event kinds whose lines of the student's code point where to look: "save", or "enter:barrier" for the
    # events of that kind that are calls of that name.
    lines_of: tuple[str, ...] = ()

    def steps(self, lesson: str, runs=None, message: str = "") -> dict:
        """The three steps as shown, with the lines the ranks ran added to "where"; JSON-ready."""
        lesson_of, heading = self.place(lesson)
        return {"idea": self.idea, "lesson": lesson_of, "section": heading,
                "where": self.where + _lines_seen(self.lines_of, runs, message), "how": self.how}

    def place(self, lesson: str) -> tuple[str, str]:
        """(lesson, heading) of the section this hint points to."""
        head, sep, rest = self.section.partition(":")
        return (head, rest.strip()) if sep and head in LESSON_FILES else (lesson, self.section)


def link(lesson: str, heading: str, base: str = "../lessons/") -> str:
    """The lesson's section as JupyterLab links to it: the notebook, and the heading's text with '-' for spaces."""
    anchor = heading.replace("`", "").strip().replace(" ", "-")
    return f"{base}{LESSON_FILES.get(lesson, '')}#{quote(anchor, safe='.-:(),')}"


def where_read(steps: dict) -> str:
    """"lesson 2, section "7. Saving a checkpoint..."": the section in words."""
    return f"lesson {steps.get('lesson', '?')}, section \"{steps.get('section', '').replace('`', '')}\""


def first_step_line(steps: dict) -> str:
    """What a report says under a failed check: the idea, and where the lesson teaches it."""
    return f"Hint: {steps['idea']} (see {where_read(steps)})"


def step_text(steps: dict, step: str) -> str:
    text = steps.get(step, "")
    return f"{text} Read {where_read(steps)}." if step == "idea" else text


def _lines_seen(kinds: tuple[str, ...], runs, message: str) -> str:
    """" Your code: ..." with the student's lines named in the message and those the ranks ran for ``kinds``, in the
    launch the message names (else in every launch)."""
    found: dict[str, set[int]] = {}
    for line in _LINE.findall(message or ""):
        if line.split(" line ")[0] not in _COURSE_FILES:
            found.setdefault(line, set())
    worlds = list(runs or [])
    named = [w for w in worlds if (message or "").startswith((f"{w.label}:", f"{w.label} ("))]
    for world in named or worlds:
        for r in world.ranks:
            for e in r.events:
                call = _wanted(e, kinds)
                if call and e["caller"].split(" line ")[0] not in _COURSE_FILES:
                    found.setdefault(f"{call[:40]} at {e['caller'][:120]}", set()).add(r.rank)
    found = {line: ranks for line, ranks in found.items()  # a line the message names, and a call seen on it: once
             if ranks or not any(other != line and other.endswith(f" at {line}") for other in found)}
    if not found:
        wanted = ", ".join(k.split(":")[1] if ":" in k else _CALLS.get(k, k) for k in kinds)
        return f" The ranks ran no {wanted} of your code." if kinds else ""
    shown = [line + (f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, sorted(ranks)))})" if ranks else "")
             for line, ranks in list(found.items())[:4]]
    return " Your code: " + "; ".join(shown) + "."


def _wanted(event: dict, kinds: tuple[str, ...]) -> str | None:
    """What the event is a call of, if it is one of ``kinds`` and says where in the code it was made."""
    kind = event.get("kind")
    if not isinstance(event.get("caller"), str):
        return None
    call = str(event.get("op") or event.get("call") or "") if kind in ("enter", "collective") else _CALLS.get(kind, kind)
    for wanted in kinds:
        name, _, only = wanted.partition(":")
        if name == kind and (not only or only == call):
            return call or _CALLS.get(kind, kind)
    return None


class Shown:
    """What ``hint(ID)`` shows (progress.next_hint's answer): plain text, or HTML with the lesson's section linked."""

    def __init__(self, exercise_id: str, given: dict, call: str):
        self.exercise_id, self.given, self.call = exercise_id, given, call

    def _next(self) -> str:
        if self.given["step"] < self.given["of"]:
            return f"For the next step: {self.call} again."
        return "That was the last step; run the check again once you have changed your code."

    def __repr__(self) -> str:
        g = self.given
        if "message" in g:
            return f"Exercise {self.exercise_id}: {g['message']}."
        return (f"Exercise {self.exercise_id}, hint {g['step']} of {g['of']} for \"{g['check']}\", {g['title']}:\n"
                f"{g['text']}\n{self._next()}")

    def _repr_html_(self) -> str:
        g = self.given
        if "message" in g:
            return f"<p class='autograder-hint'>{html.escape(repr(self))}</p>"
        text = html.escape(g["text"])
        if g["step"] == 1:
            read = html.escape(where_read(g))
            text = text.replace(read, f"<a href='{html.escape(link(g.get('lesson', ''), g.get('section', '')))}' "
                                      f">{read}</a>")
        return (f"<div class='autograder-hint' style='border-left:3px solid #9a6700;padding:4px 8px'>"
                f"<p><b>Exercise {html.escape(self.exercise_id)}, hint {g['step']} of {g['of']}</b> for "
                f"&ldquo;{html.escape(g['check'])}&rdquo;, {html.escape(g['title'])}:</p><p>{text}</p>"
                f"<p style='color:#6e7781'>{html.escape(self._next())}</p></div>")
