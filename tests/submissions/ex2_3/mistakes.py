"""Exercise 2.3's negative controls that are one edit of correct_tutorial.py (see ../edits.py)."""

BASE = "correct_tutorial.py"
SAVE = "    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), CHECKPOINT)\n"

MISTAKES = {
    "wrong_no_set_epoch": (
        "forgets sampler.set_epoch(epoch): the same order every epoch",
        [("        sampler.set_epoch(epoch)\n", "")]),
    "wrong_every_rank_saves": (
        "every rank writes the checkpoint",
        [(SAVE, "    torch.save(model.module.state_dict(), CHECKPOINT)\n")]),
    "wrong_saves_on_local_rank0": (
        "saves on local rank 0: once per node",
        [("    if dist.get_rank() == 0:\n", "    if local_rank == 0:  # the first process of every node, not of the job\n")]),
    "wrong_saves_wrapper": (
        "saves the DDP wrapper's state_dict: every key starts with 'module.'",
        [("torch.save(model.module.state_dict()", "torch.save(model.state_dict()")]),
    "wrong_no_destroy": (
        "never destroys the process group",
        [("    dist.destroy_process_group()\n", "")]),
    "wrong_no_sampler": (
        "builds a sampler but the loader ignores it: every rank reads all the data",
        [("sampler=sampler)", "shuffle=True)")]),
    "wrong_shuffle_beside_sampler": (
        "shuffle=True beside the sampler",
        [("sampler=sampler)", "sampler=sampler, shuffle=True)")]),
    "wrong_barrier_on_rank0_only": (
        "waits for the other ranks before saving, but only rank 0 calls the barrier",
        [(SAVE, SAVE.replace("        torch.save", "        dist.barrier()\n        torch.save"))]),
}
