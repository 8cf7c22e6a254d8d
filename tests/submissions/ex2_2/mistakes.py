"""Exercise 2.2's negative controls that are one edit of correct_tutorial.py (see ../edits.py)."""

BASE = "correct_tutorial.py"
SAVE = "    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), CHECKPOINT)\n"

MISTAKES = {
    "wrong_no_sampler_lr_scaled": (
        "reads all the data on every rank, and scales the learning rate by the world size as if the batch grew",
        [("sampler=sampler)", "shuffle=True)"),
         ("lr=LR)", "lr=LR * dist.get_world_size())")]),
    "correct_also_saves_the_optimizer": (
        "rank 0 saves the model's checkpoint, then the optimizer's state to a file of its own",
        [(SAVE, SAVE + "        torch.save(optimizer.state_dict(), \"optimizer.pt\")\n")]),
    "correct_default_backend": (
        "init_process_group() with no backend named: PyTorch gives the group gloo for CPU tensors, nccl for GPU ones",
        [('        dist.init_process_group("nccl")\n', "        dist.init_process_group()\n"),
         ('        dist.init_process_group("gloo")\n', "        dist.init_process_group()\n")]),
    "correct_loader_workers": (
        "a DataLoader with two worker processes, as real training scripts have: they need shared memory",
        [("sampler=sampler)", "sampler=sampler, num_workers=2)")]),
    "wrong_no_set_epoch": (
        "forgets sampler.set_epoch(epoch): the same order every epoch",
        [("        sampler.set_epoch(epoch)\n", "")]),
    "wrong_sampler_unshuffled": (
        "a sampler that never shuffles: set_epoch is called, but the order is the same every epoch",
        [("DistributedSampler(dataset)", "DistributedSampler(dataset, shuffle=False)")]),
    "wrong_set_epoch_after_the_epoch": (
        "calls set_epoch(epoch) after the epoch's batches: each call changes only the next epoch's order",
        [("        sampler.set_epoch(epoch)\n        for x, y in loader:\n",
          "        for x, y in loader:\n"),
         ("            optimizer.step()\n", "            optimizer.step()\n        sampler.set_epoch(epoch)\n")]),
    "wrong_set_epoch_zero": (
        "set_epoch(0) every epoch: called, but with the same number",
        [("sampler.set_epoch(epoch)", "sampler.set_epoch(0)")]),
    "wrong_batch_times_world_size": (
        "takes the global batch on every process: each rank's batch is world size times too big",
        [("batch_size=BATCH_SIZE,", "batch_size=BATCH_SIZE * dist.get_world_size(),")]),
    "wrong_barrier_before_backward_on_rank0": (
        "rank 0 waits in a barrier while the others are inside DDP's gradient all-reduce in backward()",
        [("            loss.backward()\n",
          "            if dist.get_rank() == 0:\n                dist.barrier()\n            loss.backward()\n")]),
    "correct_new_sampler_each_epoch": (
        "a new shuffling sampler every epoch, seeded with the epoch number, instead of set_epoch: the order changes",
        [("        sampler.set_epoch(epoch)\n        for x, y in loader:\n",
          "        sampler = DistributedSampler(dataset, seed=epoch)\n"
          "        for x, y in DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler):\n")]),
    "wrong_last_rank_saves": (
        "the last rank alone writes the checkpoint: one writer, the right file, but not global rank 0",
        [("    if dist.get_rank() == 0:\n", "    if dist.get_rank() == dist.get_world_size() - 1:\n")]),
    "correct_saved_beside_then_replaced": (
        "writes the checkpoint beside its place, then os.replace()s it there: the file judged is where it ended up",
        [(SAVE, "    if dist.get_rank() == 0:\n        torch.save(model.module.state_dict(), CHECKPOINT + '.partial')\n"
                "        os.replace(CHECKPOINT + '.partial', CHECKPOINT)\n")]),
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
    "wrong_barrier_on_rank0_at_three_ranks": (
        "rank 0 waits in a barrier that the others never call, from three processes on: two run to the end",
        [(SAVE, SAVE.replace("        torch.save", "        if dist.get_world_size() > 2:\n            dist.barrier()\n"
                                                    "        torch.save"))]),
    "wrong_barrier_on_rank0_only": (
        "waits for the other ranks before saving, but only rank 0 calls the barrier",
        [(SAVE, SAVE.replace("        torch.save", "        dist.barrier()\n        torch.save"))]),
}
