"""Exercise 4.0: concept check. Six questions on lesson 4, numbers and options, each a check of its own."""

from __future__ import annotations

from autograder.exercises import quiz
from autograder.hints import Hint

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

# question id -> the steps towards working it out, never the answer.
HINTS = {
    "rank_on_node": Hint(
        idea="How torchrun numbers the workers of a job across its machines: a worker's global RANK follows from its "
             "machine's node rank and its LOCAL_RANK on that machine.",
        section="4. Several machines",
        where="Reason with three numbers from the command: the node rank of the second machine, the workers each "
              "machine starts (--nproc-per-node), and the worker's LOCAL_RANK.",
        how="Count the workers of all the machines numbered before this one, then add the worker's place on its own "
            "machine; remember that every count starts at 0."),
    "restart": Hint(
        idea="What torchrun's agent does with a worker group when one of its worker processes dies and restarts "
             "are still allowed.",
        section="3. Fault tolerance: restarts and snapshots",
        where="Compare each option with the steps of a restart: what happens to the workers that are still healthy, "
              "what is started, and whether a restart is counted.",
        how="Follow the numbered steps that section 3 gives for a restart after a worker dies, one at a time, and "
            "keep the option that describes all of them; the timeline of the restarted job shows the same."),
    "local_rank_flag": Hint(
        idea="How a worker learns its local rank under torchrun, and what has changed since the old launcher that "
             "added a command-line argument to each worker.",
        section="2. One script for every launch",
        where="Think about the command line each worker receives under torchrun, and about what argparse gives an "
              "option that nobody passes.",
        how="Find in section 2 where torchrun puts a worker's local rank, then follow the old script line by line on "
            "each of the four workers: what value the option holds, and which GPU each worker then selects."),
    "resume_epoch": Hint(
        idea="Turning a snapshot's count of completed epochs into the number of the epoch a restarted job starts at, "
             "when epochs are numbered from 0.",
        section="3. Fault tolerance: restarts and snapshots",
        where="Reason with the count the latest snapshot holds and the way the epochs are numbered; decide whether "
              "the number of earlier restarts plays any part.",
        how="Write down the numbers of the epochs that are complete when that many are done, counting from 0; the job "
            "goes on at the first number not on your list."),
    "atomic": Hint(
        idea="Why a snapshot is first written under another name and then renamed onto its real path.",
        section="Break it: a kill during the save",
        where="Think about what a worker killed in the middle of writing leaves on disk, and about what a rename "
              "within one file system guarantees (and what it does not do).",
        how="Picture rank 0 killed halfway through a write, once writing the snapshot's own file and once writing "
            "the temporary one, and ask what the next attempt finds at the snapshot's path each time. Then check "
            "each option's claim against what the lesson says the rename does."),
    "rdzv_id": Hint(
        idea="What the rendezvous id does in the c10d rendezvous, when two agents share an endpoint but not an id.",
        section="4. Several machines",
        where="Reason with the agents' options: the same endpoint, different ids, and the number of machines each "
              "agent waits for (--nnodes).",
        how="Read what section 4 says the id is for. Then count, for each agent, the agents in the rendezvous it "
            "joins, compare that with the machines it needs, and recall what an agent does while some are missing."),
}

digest = quiz.digest_of("4.0")
EXERCISE = quiz.concept_check("4.0", QUESTIONS, ACCEPTED, digest, hints=HINTS)
