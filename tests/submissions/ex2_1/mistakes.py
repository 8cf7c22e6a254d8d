"""Exercise 2.1's negative controls that are one edit of correct_environ.py (see ../edits.py)."""

BASE = "correct_environ.py"

MISTAKES = {
    "wrong_swapped_return": (
        "returns the local rank and the rank in each other's places",
        [("    return rank, local_rank, world_size, device\n", "    return local_rank, rank, world_size, device\n")]),
}
