"""Exercise 1.0: concept check. Six questions on lesson 1, mostly numbers, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz
from autograder.hints import Hint

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
# question id -> the steps towards working it out, never the answer.
HINTS = {
    "adam_bytes": Hint(
        idea="What training keeps in memory for every parameter: the weight, its gradient and the optimizer's "
             "state, each stored at its own precision.",
        section="1. Why split training at all",
        where="Your answer to `adam_bytes`: go through each copy the question names for one parameter, and the "
              "precision each one is kept in.",
        how="Write down how many bytes one value takes in bf16 and in fp32, multiply each by how many values of "
            "that precision one parameter keeps, and add them up."),
    "skipped_collective": Hint(
        idea="How the ranks of a group meet in a collective, and what a rank inside one does when a peer of "
             "the group never joins it.",
        section="Every rank calls every collective, in the same order",
        where="Your answer to `skipped_collective`: rank 1 is still alive (asleep, not exited) and calls no "
              "collective for an hour; think about what ranks 0 and 2 can know of it meanwhile.",
        how="Ask what data ranks 0 and 2 need from rank 1 to finish their all-reduce, and whether anything "
            "delivers it; then reread what section 2 says happens next in that case, under gloo's default "
            "settings, and what a process group can and cannot know about a rank that calls nothing."),
    "ring_sent": Hint(
        idea="The traffic of a ring all-reduce: how many chunks each rank sends in its two phases, and how "
             "large one chunk is.",
        section="4. How an all-reduce works",
        where="Your answer to `ring_sent`: the number of ranks, the size of the tensor, and the two phases of "
              "the ring, reduce-scatter then all-gather.",
        how="Count the steps of each phase for this number of ranks; each step sends one chunk, a 1/W share of "
            "the tensor. Multiply the number of chunks a rank sends by the size of one chunk in MB."),
    "naive_sent": Hint(
        idea="Where the load of an all-reduce through one rank falls: rank 0 collects every tensor and hands "
             "the sum back to each of the others.",
        section="4. How an all-reduce works",
        where="Your answer to `naive_sent`: only what rank 0 sends counts here, not what it receives.",
        how="Count how many ranks must get the sum from rank 0, and how large each of those messages is, then "
            "multiply the two."),
    "bubble": Hint(
        idea="The pipeline bubble: the share of a GPipe step in which a stage has no micro-batch to work on.",
        section="5. Pipeline parallelism",
        where="Your answer to `bubble`: the number of stages and the number of micro-batches, with balanced "
              "stages as the question says.",
        how="Count the time slots a step takes when the micro-batches enter the stages one slot after another, "
            "count the slots in which one stage is busy, and take the idle slots' share of the total; the "
            "bubble formula of section 5 says the same in terms of stages and micro-batches."),
    "tp_allreduces": Hint(
        idea="Where a Megatron MLP communicates: which tensors must be summed over the ranks in the forward "
             "pass and which in the backward pass.",
        section="6. Tensor parallelism",
        where="Your answer to `tp_allreduces`: the two autograd functions f and g placed around the split "
              "layers, and what each one does going forward and going backward.",
        how="Go through f and g one at a time, forward then backward, and count the passes in which one of "
            "them sums a tensor over the ranks; a pass that is the identity sends nothing."),
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
EXERCISE = quiz.concept_check("1.0", QUESTIONS, ACCEPTED, digest, hints=HINTS)
