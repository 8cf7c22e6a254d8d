"""Exercise 3.3's negative controls that are one edit of correct_consolidate.py (see ../edits.py)."""

BASE = "correct_consolidate.py"
ZERO = "    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=lr)\n"
CONSOLIDATE = "    optimizer.consolidate_state_dict(to=0)\n"

MISTAKES = {
    "wrong_plain_adam": (
        "builds a plain Adam, a whole copy of the state on every rank",
        [(ZERO, "    return torch.optim.Adam(model.parameters(), lr=lr)\n"), (CONSOLIDATE, "")]),
    "wrong_default_learning_rate": (
        "forgets to pass the learning rate, so Adam uses its default",
        [(ZERO, "    return ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam)\n")]),
    "wrong_consolidates_on_rank0_only": (
        "consolidates on rank 0 only, inside the saving branch",
        [(CONSOLIDATE + "    if dist.get_rank() == 0:\n", "    if dist.get_rank() == 0:\n        optimizer.consolidate_state_dict(to=0)\n")]),
    "wrong_saves_without_consolidating": (
        "saves the optimizer's state_dict without consolidating it first",
        [(CONSOLIDATE, "")]),
    "wrong_saves_local_shard": (
        "saves the local optimizer's state, rank 0's shard only",
        [('"optimizer": optimizer.state_dict()', '"optimizer": optimizer.optim.state_dict()')]),
    "wrong_last_rank_saves": (
        "consolidates to the last rank, which alone saves: one writer, but not rank 0",
        [(CONSOLIDATE, "    last = dist.get_world_size() - 1\n    optimizer.consolidate_state_dict(to=last)\n"),
         ("    if dist.get_rank() == 0:\n        torch.save(", "    if dist.get_rank() == last:\n        torch.save(")]),
    "wrong_every_rank_saves": (
        "has every rank save the checkpoint",
        [("    if dist.get_rank() == 0:\n        torch.save(", "    if True:\n        torch.save(")]),
    "wrong_saves_wrapper": (
        "saves the DDP wrapper's state_dict, whose keys start with 'module.'",
        [('"model": model.module.state_dict()', '"model": model.state_dict()')]),
}
