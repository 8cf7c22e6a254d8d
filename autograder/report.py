"""Results as small dataclasses that render themselves: JSON, terminal text, HTML."""

from __future__ import annotations

import html
import json
from dataclasses import asdict, dataclass

SKIPPED_ON_CPU = "only meaningful with one GPU per rank (nccl); this run used gloo on CPUs"
STATUSES = ("passed", "failed", "error", "timeout", "skipped")
_MARK = {"passed": "✓", "failed": "✗", "error": "!", "timeout": "…", "skipped": "–"}  # glyphs every font has
# Notebooks right-align table cells by default, and some pages break words anywhere: neither here.
_CELL = "text-align:left;vertical-align:top;padding:2px 8px;word-break:normal;overflow-wrap:break-word"
_PRE = "white-space:pre-wrap;word-break:normal;overflow-wrap:break-word;margin:0;text-align:left;background:none;border:0"
_HEADINGS = ("status", "check", "points", "what was seen")
_COLOUR = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e", "timeout": "#9a6700", "skipped": "#6e7781"}


@dataclass
class CheckResult:
    name: str
    status: str
    points: float
    max_points: float
    message: str = ""
    hints: dict | None = None  # a failed check's hints in steps (hints.py): idea, lesson, section, where, how

    def __post_init__(self):
        assert self.status in STATUSES, self.status


@dataclass
class Report:
    exercise: str
    title: str
    backend: str
    world_sizes: list[int]
    checks: list[CheckResult]
    problem: str = ""  # what stopped the student's code, shown before the checks
    elapsed: float = 0.0
    not_started: bool = False
    sandbox: str = ""  # "bubblewrap", or "off (why)"
    timeline: dict | None = None  # the run drawn rank by rank (timeline.Timeline as data), when one was traced

    @property
    def max_score(self) -> float:
        """What the exercise is worth: every check, the skipped ones too (the same on every machine)."""
        return round(sum(c.max_points for c in self.checks), 2)

    @property
    def score(self) -> float:
        """The points earned, out of ``max_score``, rounded to two decimals: one number for every front end.

        Checks skipped on this machine (GPU-only ones on CPUs) could not be judged, so the checks
        that were judged count for them: the share of the judged points earned, times ``max_score``.
        """
        judged = sum(c.max_points for c in self.checks if c.status != "skipped")
        earned = sum(c.points for c in self.checks)
        return round(earned / judged * self.max_score, 2) if judged else 0.0

    @property
    def skipped(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "skipped"]

    @property
    def all_passed(self) -> bool:
        return all(c.status in ("passed", "skipped") for c in self.checks) and bool(self.checks)

    def to_dict(self) -> dict:
        return {
            "exercise": self.exercise,
            "score": self.score,
            "max_score": self.max_score,
            "backend": self.backend,
            "world_sizes": self.world_sizes,
            "checks": [asdict(c) for c in self.checks],
            "title": self.title,
            "problem": self.problem,
            "not_started": self.not_started,
            "elapsed": round(self.elapsed, 3),
            "sandbox": self.sandbox,
            "timeline": self.timeline,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, d: dict) -> "Report":
        return cls(
            exercise=d["exercise"],
            title=d.get("title", ""),
            backend=d["backend"],
            world_sizes=d["world_sizes"],
            checks=[CheckResult(**c) for c in d["checks"]],
            problem=d.get("problem", ""),
            elapsed=d.get("elapsed", 0.0),
            not_started=d.get("not_started", False),
            sandbox=d.get("sandbox", ""),
            timeline=d.get("timeline") if isinstance(d.get("timeline"), dict) else None,
        )

    def headline(self) -> str:
        sizes = ", ".join(map(str, self.world_sizes))
        verdict = "not implemented yet" if self.not_started else ("all checks passed" if self.all_passed else "some checks failed")
        how = f"{self.backend}, world sizes {sizes}" if self.world_sizes else "read, not run"
        line = (f"Exercise {self.exercise} ({self.title}): {_num(self.score)}/{_num(self.max_score)} points, {verdict}"
                f" [{how}, {self.elapsed:.1f} s]")
        on_gpu = [c for c in self.skipped if c.max_points]  # a check worth nothing costs nothing when skipped
        if on_gpu:
            worth = _num(sum(c.max_points for c in on_gpu))
            line += (f". {len(on_gpu)} check(s) worth {worth} point(s) need a GPU per rank and were skipped here; "
                     f"your score is what you earned on the other checks, scaled to {_num(self.max_score)}")
        return line

    def sandbox_line(self) -> str:
        """Said only when the submission ran outside the sandbox."""
        if not self.sandbox.startswith("off"):
            return self.sandbox.removeprefix("bubblewrap; ").capitalize() + "." if self.sandbox.startswith("bubblewrap;") else ""
        return f"Ran without the sandbox: {self.sandbox.removeprefix('off ').strip('()')}."

    def to_text(self) -> str:
        lines = [self.headline()]
        if self.sandbox_line():
            lines.append(self.sandbox_line())
        if self.problem:
            lines += ["", _indent(self.problem, "  | ")]
        lines.append("")
        for c in self.checks:
            lines.append(f"{_MARK[c.status]} {c.name}  ({_points(c)}, {c.status})")
            if c.message and c.status != "passed":
                lines.append(_indent(c.message, "    "))
        if self.more_help():
            lines += ["", self.more_help()]
        if self.timeline:
            lines += ["", _drawn(self.timeline).to_text()]
        return "\n".join(lines)

    def more_help(self) -> str:
        """Where the next steps of the first failed check's hint are (hints.py), when it has them."""
        first = next((c for c in self.checks if c.status == "failed" and c.hints), None)
        if first is None:
            return ""
        return (f"Stuck on \"{first.name}\"? hint(\"{self.exercise}\") in the notebook (or python -m autograder "
                f"hint {self.exercise} YOUR_NOTEBOOK) shows where to look in your code, then how to fix it.")

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='{_CELL};color:{_COLOUR[c.status]};font-weight:bold;white-space:nowrap'>"
            f"{_MARK[c.status]} {c.status}</td>"
            f"<td style='{_CELL}'>{html.escape(c.name)}</td>"
            f"<td style='{_CELL};white-space:nowrap'>{_points(c)}</td>"
            f"<td style='{_CELL}'>{_message_html(c)}</td></tr>"
            for c in self.checks
        )
        problem = (
            f"<pre style='background:#fff8f8;border-left:3px solid #cf222e;padding:6px;white-space:pre-wrap;"
            "word-break:normal;overflow-wrap:break-word'>"
            f"{html.escape(self.problem)}</pre>"
            if self.problem
            else ""
        )
        headings = "".join(f"<th style='{_CELL}'>{h}</th>" for h in _HEADINGS)
        colour = _COLOUR["passed" if self.all_passed else "failed"]
        more = f"<p>{html.escape(self.more_help())}</p>" if self.more_help() else ""
        return (
            f"<div class='autograder-report'><p style='font-weight:bold;color:{colour}'>{html.escape(self.headline())}</p>"
            f"{problem}<table><thead><tr>{headings}</tr></thead>"
            f"<tbody>{rows}</tbody></table>{more}{self._timeline_html()}</div>"
        )

    def _timeline_html(self) -> str:
        if not self.timeline:
            return ""
        drawn = _drawn(self.timeline)
        whose = drawn.title.split(" at ")[0] if drawn.title else "Your run"
        return (f"<details style='margin-top:6px'><summary>{html.escape(whose)}, rank by rank</summary>"
                f"{drawn.to_svg()}</details>")


def _drawn(timeline: dict):
    from autograder.timeline import Timeline

    return Timeline.from_dict(timeline)


def _message_html(c: CheckResult) -> str:
    """What was seen, for a check that did not pass; nothing (not an empty box) for one that did."""
    if c.status == "passed" or not c.message:
        return ""
    shown = html.escape(c.message)
    if c.hints:  # the lesson's section, as a link
        from autograder.hints import link, where_read

        read = html.escape(where_read(c.hints))
        shown = shown.replace(read, f"<a href='{html.escape(link(c.hints.get('lesson', ''), c.hints.get('section', '')))}' "
                                    f">{read}</a>")
    return f"<pre style='{_PRE}'>{shown}</pre>"


def _points(c: CheckResult) -> str:
    """"2/3", or "no points" for a check that only shows something (1.5's comparison with the student's own code)."""
    return f"{_num(c.points)}/{_num(c.max_points)}" if c.max_points else "no points"


def _num(x: float) -> str:
    return f"{x:g}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())
