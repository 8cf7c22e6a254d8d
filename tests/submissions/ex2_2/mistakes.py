"""Exercise 2.2's negative controls that are one edit of correct_explicit.py (see ../edits.py)."""

BASE = "correct_explicit.py"

MISTAKES = {
    "wrong_batch_times_world_size": (
        "multiplies the batch size by the world size, although batch_size is per process",
        [("batch_size=batch_size,", "batch_size=batch_size * dist.get_world_size(),")]),
}
