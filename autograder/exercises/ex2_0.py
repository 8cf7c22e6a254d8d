"""Exercise 2.0: concept check. Six questions on how DDP works, each a check of its own."""

from __future__ import annotations

import hashlib

from autograder.exercises import quiz
from autograder.hints import Hint

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
# question id -> the steps towards working it out: what to reason about, never the answer.
HINTS = {
    "sync": Hint(
        idea="Q1 asks what DDP sends between the processes, and when, so that replicas which train apart stay equal.",
        section="5. Wrapping the model in DDP",
        where="Your answer to Q1: for each option, note what travels between the ranks (weights or gradients) and "
              "when (once, every step, or only at the end).",
        how="List what section 5 says the wrapper does at construction, during backward and at each forward, then "
            "rule out every option that has something travel that DDP never sends, or at another time."),
    "processes": Hint(
        idea="Q2 asks what one process per device gains over one process that drives every device from threads.",
        section="1. One process per device",
        where="Your answer to Q2: compare each option with what section 1 says nn.DataParallel does on every "
              "iteration, and what that costs.",
        how="Check each option against the lesson: drop any that states something about GPUs, threads or memory "
            "the lesson never claims, and keep the one whose reasons are the single-process design's costs."),
    "set_epoch": Hint(
        idea="Q3 asks how a DistributedSampler shuffles, and what telling it the epoch changes.",
        section="6. `DistributedSampler`: a different share of the data for each rank",
        where="Your answer to Q3: think about the seed the sampler's shuffle starts from, what changes it from one "
              "epoch to the next, and whether it differs from rank to rank.",
        how="Follow one epoch through the sampler as section 6 describes it: where its random order comes from, how "
            "each rank cuts its share out of that order, and which of these the epoch number changes."),
    "global_batch": Hint(
        idea="Q4 asks for the global batch: every sample whose gradient goes into one averaged optimizer step.",
        section="Averaged, not summed: the global batch and the learning rate",
        where="Your answer to Q4: count the processes of the whole job, over all its machines, and what each one "
              "takes from its own loader in one step.",
        how="One step averages the gradients of every process, so its samples are every process's batch together: "
            "multiply the number of processes in the job by the per-process batch size."),
    "save": Hint(
        idea="Q5 asks who writes the checkpoint and which state dictionary goes into it.",
        section="7. Saving a checkpoint: once, from rank 0, without `module.`",
        where="Your answer to Q5: two choices to weigh, how many processes write, and whether they save the "
              "wrapper's state dictionary or that of the model inside it.",
        how="Ask what several processes writing at once costs when every replica holds the same weights, and which "
            "keys each state dictionary carries: would they load into a plain, unwrapped model?"),
    "backend": Hint(
        idea="Q6 asks for the communication backend that moves tensors held in CPU memory.",
        section="3. `init_process_group` comes first",
        where="Your answer to Q6: a backend's name, the string that init_process_group takes as its first argument.",
        how="Section 3 lists the two backends this course uses, each with the kind of tensors it moves: take the one "
            "for CPU tensors and write its name as the lesson spells it."),
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


EXERCISE = quiz.concept_check("2.0", QUESTIONS, ACCEPTED, digest, hints=HINTS)
