"""What the concept checks share: read the ANSWERS dict in a rank, judge each answer by its digest."""

from __future__ import annotations

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
