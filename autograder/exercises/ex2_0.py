"""Exercise 2.0: concept check. Six questions on how DDP works, each a check of its own."""

from __future__ import annotations

import hashlib

from autograder.exercises import quiz

# question id -> (what the question is about, where the lesson explains it).
# Check names say what is asked, never the answer: students read them before answering.
QUESTIONS = {
    "sync": ("Q1: how DDP keeps the replicas identical", "section 5, wrapping the model in DDP"),
    "processes": ("Q2: why one process per device", "section 1, one process per device"),
    "set_epoch": ("Q3: what sampler.set_epoch(epoch) does", "section 6, DistributedSampler"),
    "global_batch": ("Q4: samples in one optimizer step", "sections 5 and 6"),
    "save": ("Q5: who saves the checkpoint, and what", "section 7, saving on rank 0"),
    "backend": ("Q6: the backend for CPU-only machines", "section 3, init_process_group"),
}
# The accepted answers, as digests: the key is not readable from the installed package. The
# ranks never see even these; the grader compares after they have ended.
ACCEPTED = {
    "sync": {'fde359545b23ae2d84aa6c8c3ca4dbe1'},
    "processes": {'9e56e42105495a8a0acfd3e007d34995'},
    "set_epoch": {'bdd6318f7fe7412f76faa47fd8407511'},
    "global_batch": {'776d3cf420b2f273d7d881ce38979d0e'},
    "save": {'5f28f98451dac56a8a3a0355436de8c8'},
    "backend": {'097f3f1a5fb3d012f115ac784e8aa764', '7efb40d528ec66cbfd27b8e6e4a0938f'},
}


def digest(key: str, answer) -> str:
    return hashlib.sha256(f"ddp-course 2.0 {key}: {str(answer).strip().lower()}".encode()).hexdigest()[:32]


EXERCISE = quiz.concept_check("2.0", QUESTIONS, ACCEPTED, digest)
