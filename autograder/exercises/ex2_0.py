"""Exercise 2.0: concept check. Six questions on how DDP works, each a check of its own."""

from __future__ import annotations

from autograder.checks import Check
from autograder.exercises import Exercise

# question id -> (what the question is about, the accepted answers, where the lesson explains it).
# Check names say what is asked, never the answer: students read them before answering.
QUESTIONS = {
    "sync": ("Q1: how DDP keeps the replicas identical", {"b"}, "section 5, wrapping the model in DDP"),
    "processes": ("Q2: why one process per device", {"c"}, "section 1, one process per device"),
    "set_epoch": ("Q3: what sampler.set_epoch(epoch) does", {"a"}, "section 6, DistributedSampler"),
    "global_batch": ("Q4: samples in one optimizer step", {"32"}, "sections 5 and 6"),
    "save": ("Q5: who saves the checkpoint, and what", {"d"}, "section 7, saving on rank 0"),
    "backend": ("Q6: the backend for CPU-only machines", {"gloo"}, "section 3, init_process_group"),
}


def harness(student, rank, layout, rec, **_):
    answers = getattr(student, "ANSWERS", None)
    if not isinstance(answers, dict):
        return {"error": f"ANSWERS must be a dict, not {type(answers).__name__}"}
    return {str(k): None if v is None else str(v).strip().lower() for k, v in answers.items()}


def _question(key: str, accepted: set[str], where: str):
    def verify(runs):
        given = runs.worlds[0].ranks[0].result
        if "error" in given:
            return given["error"]
        if given.get(key) is None:
            return f"ANSWERS[{key!r}] is not answered yet"
        if given[key] not in accepted:
            return f"ANSWERS[{key!r}] = {given[key]!r} is not right; lesson 2, {where}, explains it"
    return verify


EXERCISE = Exercise(
    id="2.0",
    title="concept check",
    kind="function",
    entry="ANSWERS",
    harness=harness,
    world_sizes=(1,),
    checks=[Check(name, 1, _question(key, accepted, where)) for key, (name, accepted, where) in QUESTIONS.items()],
)
