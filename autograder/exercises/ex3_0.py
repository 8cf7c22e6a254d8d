"""Exercise 3.0: concept check. Six questions on lesson 3, numbers and options, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz
from autograder.hints import Hint

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

# The steps towards each answer, never the answer.
HINTS = {
    "zero1_gb": Hint(
        idea="How much training state ZeRO stage 1 leaves on each rank: the parameters, the gradients and Adam's "
             "moments, counted apart.",
        section="3. Memory per rank: what ZeRO removes",
        where="The three parts of the 16 bytes per parameter, and which of them stage 1 shares out over the ranks.",
        how="Split the 16 bytes into the parameter's, the gradient's and Adam's parts; keep whole what every rank "
            "keeps, divide the sharded part by the number of ranks, add them, then multiply by the number of "
            "parameters and write it in GB."),
    "running_stats": Hint(
        idea="Whose batches the running mean and variance of a plain batch norm layer reflect under DDP, given what "
             "DDP does with a model's buffers.",
        section="1. BatchNorm under DDP",
        where="What DDP does with the buffers at the start of every forward pass, and which rank's model is saved.",
        how="Follow one step on two ranks: what each rank's running statistics start from, which samples update "
            "them, and what the next forward pass does to them; then ask what rank 0 holds when it saves."),
    "syncbn_numbers": Hint(
        idea="What synchronized batch norm packs into its one all-reduce per layer and forward pass.",
        section="2. Synchronized batch norm",
        where="The three statistics the ranks combine, and for each whether it is one number per channel or one "
              "for the whole layer.",
        how="Count the numbers of each statistic for a layer of 64 channels and add them up."),
    "fsdp_gathers": Hint(
        idea="How often FSDP gathers each group's parameters in one training step, with the default settings.",
        section="5. FSDP: `fully_shard`",
        where="The groups the fully_shard calls make (only a group that holds parameters is gathered), and the "
              "passes of a step in which a block's full parameters are needed.",
        how="Count the groups that hold parameters; then, for one block, count its gathers in a step when its "
            "parameters are freed after its forward pass; multiply."),
    "early_optimizer": Hint(
        idea="Which tensors an optimizer built before fully_shard holds, and what that does to training.",
        section="5. FSDP: `fully_shard`",
        where="The tensors the optimizer was given, and the tensors the model uses and gives gradients to after "
              "fully_shard.",
        how="Ask whether the optimizer's tensors are still the model's parameters after sharding, whether they "
            "receive gradients, and whether anything in that raises an error or makes a rank wait."),
    "consolidate": Hint(
        idea="Why gathering a ZeroRedundancyOptimizer's state on one rank is a collective, and who takes part in it.",
        section="Saving the optimizer state",
        where="Where each rank's share of Adam's state lives, and where all of it must be before rank 0 can save it.",
        how="Ask which ranks hold pieces that must travel, and what a collective needs from every rank before it "
            "returns on any of them."),
}

digest = quiz.digest_of("3.0")
EXERCISE = quiz.concept_check("3.0", QUESTIONS, ACCEPTED, digest, hints=HINTS)
