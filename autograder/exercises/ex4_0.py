"""Exercise 4.0: concept check. Six questions on lesson 4, numbers and options, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz

# question id -> (what the question is about, where the lesson explains it).
# Check names say what is asked, never the answer: students read them before answering.
QUESTIONS = {
    "rank_on_node": ("Q1: the global rank of a worker on the second machine", "section 4, several machines"),
    "restart": ("Q2: what torchrun restarts when a worker dies", "section 3, fault tolerance"),
    "local_rank_flag": ("Q3: an old --local_rank argument under torchrun", "section 2, one script for every launch"),
    "resume_epoch": ("Q4: the epoch a restarted job resumes at", "section 3, fault tolerance"),
    "atomic": ("Q5: why a snapshot is written to another file, then renamed", "section 3, fault tolerance"),
    "rdzv_id": ("Q6: two agents given different rendezvous ids", "section 4, several machines"),
}
# The accepted answers, normalized (see quiz.normal) and stored as digests.
ACCEPTED = {
    "rank_on_node": {"a4a1ff9a8de1a81b5ba08a4770830718"},
    "restart": {"48edce6b17d091d0a588de388e7fdf61"},
    "local_rank_flag": {"fdfdbcfaf442a1d51779c6d3b59eb950"},
    "resume_epoch": {"b178c5f2f4137f68c84c6664cf56674f"},
    "atomic": {"f995669e04e16e8ca64c6bf2b95d9c8d"},
    "rdzv_id": {"ebd9b1e45b85456a5b44704240e872fe"},
}

digest = quiz.digest_of("4.0")
EXERCISE = quiz.concept_check("4.0", QUESTIONS, ACCEPTED, digest)
