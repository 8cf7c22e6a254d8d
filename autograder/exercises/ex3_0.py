"""Exercise 3.0: concept check. Six questions on lesson 3, numbers and options, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz

# question id -> (what the question is about, where the lesson explains it).
# Check names say what is asked, never the answer: students read them before answering.
QUESTIONS = {
    "zero1_gb": ("Q1: training state per rank under ZeRO stage 1", "section 3, memory per rank"),
    "running_stats": ("Q2: whose batches the saved running statistics saw", "section 1, batch norm under DDP"),
    "syncbn_numbers": ("Q3: the size of synchronized batch norm's all-reduce", "section 2, synchronized batch norm"),
    "fsdp_gathers": ("Q4: all-gathers in one FSDP training step", "section 5, FSDP"),
    "early_optimizer": ("Q5: an optimizer built before fully_shard", "section 5, FSDP"),
    "consolidate": ("Q6: who calls consolidate_state_dict", "section 4, ZeRO stage 1"),
}
# The accepted answers, normalized (see quiz.normal) and stored as digests.
ACCEPTED = {
    "zero1_gb": {"ad4c7913d54e6561781350336b7a3734"},
    "running_stats": {"3afaf6740a82b2cb41a7808e0afd4a80"},
    "syncbn_numbers": {"ee0d6e9a22ce665573e387bd686ebd5b"},
    "fsdp_gathers": {"8d973cb3ca988e62136eb896bd8edd64"},
    "early_optimizer": {"24419d6895f8faee733658ef8dbea001"},
    "consolidate": {"b83afa17de3dca45ba65c846cb92805e"},
}

digest = quiz.digest_of("3.0")
EXERCISE = quiz.concept_check("3.0", QUESTIONS, ACCEPTED, digest)
