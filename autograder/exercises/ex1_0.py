"""Exercise 1.0: concept check. Six questions on lesson 1, mostly numbers, each a check of its own."""

from __future__ import annotations

import hashlib
import re
from fractions import Fraction

from autograder.exercises import Exercise, quiz

# question id -> (what the question is about, where the lesson explains it).
# Check names say what is asked, never the answer: students read them before answering.
QUESTIONS = {
    "adam_bytes": ("Q1: bytes of training state per parameter", "section 1, why split training"),
    "skipped_collective": ("Q2: a rank that skips a collective", "section 2, the collectives"),
    "ring_sent": ("Q3: what each rank sends in a ring all-reduce", "section 4, how all-reduce works"),
    "naive_sent": ("Q4: what rank 0 sends in a naive all-reduce", "section 4, how all-reduce works"),
    "bubble": ("Q5: the idle share of a pipeline", "section 5, model (pipeline) parallelism"),
    "tp_allreduces": ("Q6: all-reduces in a tensor-parallel MLP", "section 6, tensor parallelism"),
}
# The accepted answers, normalized (see `normal`) and stored as digests.
ACCEPTED = {
    "adam_bytes": {'5a0714e7dd60b88f58d4377784bb1af8'},
    "skipped_collective": {'d2bc4bfd8d22bc578dfcd80d0c3cad97'},
    "ring_sent": {'4bd9fc89825d5b1de1820323565fb0c0'},
    "naive_sent": {'a69b591ad8b48172a59c74f4e286c8c7'},
    "bubble": {'ebcbde959eb27ec73d51e35c2daabc00'},
    "tp_allreduces": {'a2501b52696c6012876fbd1855f37e16'},
}


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


def digest(key: str, answer) -> str:
    return hashlib.sha256(f"ddp-course 1.0 {key}: {normal(answer)}".encode()).hexdigest()[:32]


EXERCISE = Exercise(
    id="1.0",
    title="concept check",
    kind="function",
    entry="ANSWERS",
    harness=quiz.harness,
    world_sizes=(1,),
    checks=quiz.questions(1, QUESTIONS, ACCEPTED, digest),
)
