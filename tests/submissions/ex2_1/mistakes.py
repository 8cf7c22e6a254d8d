"""Exercise 2.1's negative controls that are one edit of correct_environ.py (see ../edits.py)."""

BASE = "correct_environ.py"
LOADER = "    sampler = DistributedSampler(dataset)\n    return DataLoader(dataset, batch_size=batch_size, sampler=sampler)\n"

MISTAKES = {
    "wrong_swapped_return": (
        "returns the local rank and the rank in each other's places",
        [("    return rank, local_rank, world_size, device\n", "    return local_rank, rank, world_size, device\n")]),
    "wrong_no_sampler": (
        "every rank reads the whole dataset",
        [(LOADER, "    return DataLoader(dataset, batch_size=batch_size, shuffle=True)\n")]),
    "wrong_one_replica": (
        "tells the sampler there is one replica: every rank gets everything",
        [("DistributedSampler(dataset)\n", "DistributedSampler(dataset, num_replicas=1, rank=0)\n")]),
    "wrong_sampler_unshuffled": (
        "shuffle=False in the sampler: the same fixed order every epoch",
        [("DistributedSampler(dataset)\n", "DistributedSampler(dataset, shuffle=False)\n")]),
    "wrong_shuffle_beside_sampler": (
        "asks the DataLoader to shuffle too, beside the sampler",
        [("sampler=sampler)\n", "sampler=sampler, shuffle=True)\n")]),
    "wrong_batch_times_world_size": (
        "multiplies the batch size by the world size, although batch_size is per process",
        [("batch_size=batch_size,", "batch_size=batch_size * dist.get_world_size(),")]),
    "wrong_ranks_as_strings": (
        "returns the launcher's numbers as the environment holds them: text, not ints",
        [("    return rank, local_rank, world_size, device\n",
          '    return os.environ["RANK"], os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], device\n')]),
    "wrong_setup_joins_nothing": (
        "reads the launcher's numbers but never joins the process group",
        [('        dist.init_process_group("gloo")\n', ""), ('        dist.init_process_group("nccl")\n', "")]),
}
