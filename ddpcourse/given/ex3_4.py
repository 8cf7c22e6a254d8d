"""Exercise 3.4: the run's length and learning rate, and where the full weights go (its batches are 3.3's)."""

LR, STEPS = 1e-2, 4
CHECKPOINT = "fsdp_full.pt"
