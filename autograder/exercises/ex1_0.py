"""Exercise 1.0: concept check. Six questions on lesson 1, mostly numbers, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz

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
# The accepted answers, normalized (see quiz.normal) and stored as digests.
ACCEPTED = {
    "adam_bytes": {'5a0714e7dd60b88f58d4377784bb1af8'},
    "skipped_collective": {'d2bc4bfd8d22bc578dfcd80d0c3cad97'},
    "ring_sent": {'4bd9fc89825d5b1de1820323565fb0c0'},
    "naive_sent": {'a69b591ad8b48172a59c74f4e286c8c7'},
    "bubble": {'ebcbde959eb27ec73d51e35c2daabc00'},
    "tp_allreduces": {'a2501b52696c6012876fbd1855f37e16'},
}


digest = quiz.digest_of("1.0")
EXERCISE = quiz.concept_check("1.0", QUESTIONS, ACCEPTED, digest)
