"""Exercise 4.5's negative controls that are one edit of a correct solution (see ../edits.py)."""

BASE = "correct_job_generator.py"

MISTAKES = {
    "wrong_noise_of_each_rank": (
        "4.2's answer: a generator of each rank's own, all of them kept in the snapshot: no run at another size "
        "can go on with them, and a sample's noise depends on the rank that holds it",
        [("    noise = torch.Generator().manual_seed(1000)\n", "    noise = torch.Generator().manual_seed(1000 + rank)\n"),
         ('        noise.set_state(snapshot["noise"].cpu())\n', '        noise.set_state(snapshot["noise"][rank].cpu())\n'),
         ("            drawn = torch.randn((args.global_batch, *x.shape[1:]), generator=noise)\n"
          "            x = x + 0.05 * drawn[rank::world_size]\n",
          "            x = x + 0.05 * torch.randn(x.shape, generator=noise)\n"),
         ("            if step % args.snapshot_every == 0:\n",
          "            if step % args.snapshot_every == 0:\n"
          "                states = [None] * world_size\n"
          "                if distributed:\n"
          "                    dist.all_gather_object(states, noise.get_state())\n"
          "                else:\n"
          "                    states = [noise.get_state()]\n"),
         ('"noise": noise.get_state(),', '"noise": states,')]),
    "wrong_noise_rows_in_blocks": (
        "takes its rows of the global batch's noise in one block, rank * share, where its samples are dealt out in turn",
        [("            x = x + 0.05 * drawn[rank::world_size]\n",
          "            x = x + 0.05 * drawn[rank * len(x):(rank + 1) * len(x)]\n")]),
    "wrong_whole_batch_on_every_rank": (
        "every rank trains on the whole global batch: the same at any world size, and no faster for its ranks",
        [("num_replicas=world_size, rank=rank,", "num_replicas=1, rank=0,"),
         ("batch_size=args.global_batch // world_size,", "batch_size=args.global_batch,"),
         ("            x = x + 0.05 * drawn[rank::world_size]\n", "            x = x + 0.05 * drawn\n")]),
    "wrong_no_noise": (
        "drops the noise, which was the hard part",
        [("            x = x + 0.05 * drawn[rank::world_size]\n", "")]),
    "wrong_place_in_own_samples": (
        "keeps where the run is as the samples this rank has read, and goes on by this rank's batch size",
        [('"step": step})', '"step": step, "read": step * (args.global_batch // world_size)})'),
         ('        step = snapshot["step"]\n',
          '        step = snapshot["read"] // (args.global_batch // world_size)\n')]),
    "wrong_resumes_from_the_start": (
        "writes snapshots but never reads them",
        [("    if os.path.exists(args.snapshot):\n", "    if False:\n")]),
    "wrong_momentum_not_restored": (
        "restores the weights, the schedule and the noise, not the optimizer's momentum",
        [('        optimizer.load_state_dict(snapshot["optimizer"])\n',
          '        optimizer.param_groups[0]["lr"] = snapshot["optimizer"]["param_groups"][0]["lr"]\n')]),
}
