"""Exercise 2.5's negative controls: the fixed script with one of the planted bugs left in (see ../edits.py).

given_buggy.py, the script the exercise hands out, holds all of them at once.
"""

BASE = "correct_fixed.py"

MISTAKES = {
    "wrong_local_rank_as_rank": (
        "takes the local rank for the global rank: one checkpoint writer per machine",
        [("    return dist.get_rank(), device\n", "    return local_rank, device\n")]),
    "wrong_no_set_epoch": (
        "leaves out sampler.set_epoch(epoch)",
        [("        sampler.set_epoch(epoch)\n", "")]),
    "wrong_extra_all_reduce": (
        "all-reduces the gradients again after DDP has averaged them",
        [("            loss.backward()  # DDP averages the gradients over the processes here\n",
          "            loss.backward()\n            for p in model.parameters():  # make sure every process has the same gradients\n"
          "                dist.all_reduce(p.grad)\n")]),
    "wrong_saves_wrapper": (
        "saves the wrapper's state_dict: keys start with 'module.'",
        [("        torch.save(model.module.state_dict(), CHECKPOINT)\n", "        torch.save(model.state_dict(), CHECKPOINT)\n")]),
    "wrong_no_destroy": (
        "never leaves the process group",
        [("    dist.destroy_process_group()\n", "")]),
}
