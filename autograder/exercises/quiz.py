"""What the concept checks share: the ANSWERS dict read from the cell's text, each answer judged by its digest.

A concept check runs no code at all, neither the student's nor a rank's: its answers are data. The
grader reads the last ``ANSWERS = {...}`` of the cell from its syntax tree (each value a number, a
string, or arithmetic of numbers, as in ``2 * 3 / 4``; later ``ANSWERS["key"] = ...`` lines count
too) and compares a digest of each normalized answer with the accepted ones. The digests stand in for
the answers in the package, which the students can read; the sandbox does not even show it.
"""

from __future__ import annotations

import ast
import hashlib
import math
import operator
import re
from fractions import Fraction
from typing import Callable

from autograder import source
from autograder.checks import Check

NAME = "ANSWERS"
_DEPTH = 32  # nesting of one answer's arithmetic, at most
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}


class NotAnswers(ValueError):
    """The cell's ANSWERS cannot be read without running it: the message says what to write instead."""


def read(code: str) -> dict[str, str | None]:
    """The answers in the cell, key -> the answer as text (None: not answered); NotAnswers if unreadable."""
    try:
        tree = source.parse(code)
    except SyntaxError:
        raise NotAnswers("the cell does not parse: fix the syntax error first") from None
    names: dict[str, object] = {}
    answers: dict[str, object] | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id == NAME:
                answers = _answers(node.value, names)
            elif isinstance(target, ast.Name):
                names[target.id] = _maybe(node.value, names)
            elif (isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name)
                  and target.value.id == NAME and answers is not None):
                key = _value(target.slice, names)
                answers[str(key)] = _value(node.value, names)
    if answers is None:
        raise NotAnswers(f"the cell defines no {NAME}: a dictionary of the answers, written in the cell")
    return {str(k)[:100]: None if v is None else str(v)[:100] for k, v in answers.items()}


def _answers(node, names: dict) -> dict:
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {str(_value(k, names)): _value(v, names) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {k.arg: _value(k.value, names) for k in node.keywords if k.arg}
    raise NotAnswers(f"{NAME} must be written out as a dictionary, {{\"key\": answer, ...}}")


def _maybe(node, names: dict):
    try:
        return _value(node, names)
    except NotAnswers:
        return None


def _value(node, names: dict, depth: int = 0):
    """A number, a string or None written in the cell: literals, names bound to them above, arithmetic."""
    if depth > _DEPTH:
        raise NotAnswers("an answer nests its arithmetic too deeply")
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, type(None))) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name) and names.get(node.id) is not None:
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _number(_value(node.operand, names, depth + 1))
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _number(_value(node.left, names, depth + 1)), _number(_value(node.right, names, depth + 1))
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 1e6):
            raise NotAnswers("an answer's power is too large to be one")
        try:
            result = _OPERATORS[type(node.op)](left, right)
        except (ArithmeticError, ValueError):
            raise NotAnswers("an answer divides by zero") from None
        if isinstance(result, complex) or (isinstance(result, float) and not math.isfinite(result)):
            raise NotAnswers("an answer is not a finite number")
        return result
    raise NotAnswers(f"each answer in {NAME} must be a number or a string written in the cell (or arithmetic of "
                     "numbers): the grader reads it without running your code")


def _number(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    raise NotAnswers("arithmetic in an answer must be of numbers")


def not_started(code: str) -> bool:
    """The cell still raises NotImplementedError at the top level, as handed out."""
    try:
        body = source.parse(code).body
    except SyntaxError:
        return False
    return any(isinstance(n, ast.Raise) and n.exc is not None and "NotImplementedError" in ast.unparse(n.exc)
               for n in body)


def questions(lesson: int, asked: dict[str, tuple[str, str]], accepted: dict[str, set[str]],
              digest: Callable[[str, str], str], hints: dict | None = None) -> list[Check]:
    """One check of one point per question: name -> (check name, where the lesson explains it); ``hints``, by
    question, the steps towards working it out (hints.Hint), never the answer."""

    def question(key: str, where: str):
        def verify(runs):
            given = runs.params.get("answers")
            if isinstance(given, str):
                return given  # why the answers could not be read
            if given.get(key) is None:
                return f"{NAME}[{key!r}] is not answered yet"
            if digest(key, given[key]) not in accepted[key]:
                return f"{NAME}[{key!r}] = {str(given[key])[:40]!r} is not right; lesson {lesson}, {where}, explains it"
        return verify

    return [Check(name, 1, question(key, where), hint=(hints or {}).get(key, "")) for key, (name, where) in asked.items()]


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


def concept_check(exercise_id: str, asked: dict[str, tuple[str, str]], accepted: dict[str, set[str]], digest,
                  hints: dict | None = None):
    """The Exercise of a lesson's concept check: one point per question, the answers in ANSWERS."""
    from autograder.exercises import Exercise

    return Exercise(id=exercise_id, title="concept check", kind="answers", entry=NAME, on_cpu=True,
                    world_sizes=(1,), checks=questions(int(exercise_id.split(".")[0]), asked, accepted, digest, hints))
