"""What the concept checks share: read the ANSWERS dict in a rank, judge each answer by its digest."""

from __future__ import annotations

import hashlib
import re
from fractions import Fraction
from typing import Callable

from autograder.checks import Check


def harness(student, rank, layout, rec, **_):
    answers = getattr(student, "ANSWERS", None)
    if not isinstance(answers, dict):
        return {"error": f"ANSWERS must be a dict, not {type(answers).__name__}"}
    return {str(k): None if v is None else str(v)[:100] for k, v in answers.items()}


def questions(lesson: int, asked: dict[str, tuple[str, str]], accepted: dict[str, set[str]],
              digest: Callable[[str, str], str]) -> list[Check]:
    """One check of one point per question: name -> (check name, where the lesson explains it)."""

    def question(key: str, where: str):
        def verify(runs):
            given = runs.worlds[0].ranks[0].result
            if not isinstance(given, dict):
                return "the answers could not be read"
            if "error" in given:
                return str(given["error"])
            if given.get(key) is None:
                return f"ANSWERS[{key!r}] is not answered yet"
            if digest(key, given[key]) not in accepted[key]:
                return f"ANSWERS[{key!r}] = {str(given[key])[:40]!r} is not right; lesson {lesson}, {where}, explains it"
        return verify

    return [Check(name, 1, question(key, where)) for key, (name, where) in asked.items()]


def normal(answer) -> str:
    """An answer as it is compared: a number rounded to 2 decimals (3/7, 0.43, 43% alike), or a word."""
    text = str(answer).strip().lower()
    number = re.fullmatch(r"([-+]?[\d.]+(?:\s*/\s*[\d.]+)?)\s*(%|gb|mb|bytes|b)?", text)
    if number:
        try:
            value = float(Fraction(number.group(1).replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            return text
        return f"{value / 100 if number.group(2) == '%' else value:.2f}"
    return text.strip("()")


def digest_of(exercise_id: str) -> Callable[[str, object], str]:
    """How a concept check stores its accepted answers: a digest of the normalized answer."""
    def digest(key: str, answer) -> str:
        return hashlib.sha256(f"ddp-course {exercise_id} {key}: {normal(answer)}".encode()).hexdigest()[:32]
    return digest


def concept_check(exercise_id: str, asked: dict[str, tuple[str, str]], accepted: dict[str, set[str]], digest):
    """The Exercise of a lesson's concept check: one point per question, the answers in ANSWERS."""
    from autograder.exercises import Exercise

    return Exercise(id=exercise_id, title="concept check", kind="function", entry="ANSWERS", harness=harness, on_cpu=True,
                    world_sizes=(1,), checks=questions(int(exercise_id.split(".")[0]), asked, accepted, digest))
