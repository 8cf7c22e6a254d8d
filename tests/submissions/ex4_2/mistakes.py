"""Exercise 4.2's negative controls that are one edit of correct_step_snapshots.py (see ../edits.py)."""

BASE = "correct_step_snapshots.py"
LOAD = ("    if os.path.exists(args.snapshot):  # a restarted job: every rank loads the same, whole snapshot\n"
        "        snapshot = torch.load(args.snapshot, map_location=device)\n")
SAVE = ('                    save_snapshot(args.snapshot, {"model": model.state_dict(), "optimizer": optimizer.state_dict(),\n'
        '                                                  "scheduler": scheduler.state_dict(), "noise": states, "step": step})\n')
BARRIER = "                if distributed:\n                    dist.barrier()  # the snapshot is whole before any rank goes on\n"

MISTAKES = {
    "wrong_drops_the_noise": (
        "takes the noise out of the script: no generator left to carry across a restart",
        [("            x = x + 0.05 * torch.randn(x.shape, generator=noise)\n", "")]),
    "wrong_drops_the_schedule": (
        "never steps the scheduler: a constant learning rate, nothing of the schedule to carry",
        [("            scheduler.step()\n", "")]),
    "correct_rank0_reads_and_broadcasts": (
        "rank 0 alone reads the snapshot and broadcasts what it read: every rank goes on from the same state",
        [(LOAD,
          "    found = [torch.load(args.snapshot, map_location=\"cpu\") if rank == 0 and os.path.exists(args.snapshot)\n"
          "             else None]\n"
          "    if distributed:\n"
          "        dist.broadcast_object_list(found, src=0)\n"
          "    if found[0] is not None:  # a restarted job: rank 0 read the snapshot, every rank got it\n"
          "        snapshot = found[0]\n")]),
    "correct_noise_reseeded_every_step": (
        "keeps no generator state: each step reseeds the rank's generator from the rank and the step",
        [("            x = x + 0.05 * torch.randn(x.shape, generator=noise)\n",
          "            noise.manual_seed(1000 + rank + 7919 * step)\n"
          "            x = x + 0.05 * torch.randn(x.shape, generator=noise)\n"),
         ('        noise.set_state(snapshot["noise"][rank].cpu())\n', "")]),
    "correct_copied_beside_then_replaced": (
        "writes the snapshot in the system's temporary directory, copies it beside the snapshot, then os.replace()s",
        [("    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:\n",
          "    with tempfile.NamedTemporaryFile(delete=False) as tmp:\n"),
         ("    os.replace(tmp.name, path)\n",
          "    beside = os.path.join(directory, '.snapshot.partial')\n    shutil.copy(tmp.name, beside)\n"
          "    os.remove(tmp.name)\n    os.replace(beside, path)\n"),
         ("import tempfile\n", "import shutil\nimport tempfile\n")]),
    "wrong_moved_from_system_temp": (
        "writes the snapshot in the system's temporary directory, then shutil.move()s it: a copy across file systems",
        [("    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:\n",
          "    with tempfile.NamedTemporaryFile(delete=False) as tmp:\n"),
         ("    os.replace(tmp.name, path)\n", "    shutil.move(tmp.name, path)\n"),
         ("import tempfile\n", "import shutil\nimport tempfile\n")]),
    "wrong_written_in_place": (
        "writes the snapshot straight onto its path",
        [("    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:\n        torch.save(snapshot, tmp)\n"
          "    os.replace(tmp.name, path)\n", "    torch.save(snapshot, path)\n")]),
    "wrong_every_rank_writes": (
        "writes the snapshot on every rank",
        [("                if rank == 0:\n                    save_snapshot(", "                if True:\n                    save_snapshot(")]),
    "wrong_writer_local_rank": (
        "has the first process of every machine write the snapshot (LOCAL_RANK 0): one writer per machine",
        [("                if rank == 0:\n                    save_snapshot(",
          "                if local_rank == 0:\n                    save_snapshot(")]),
    "wrong_reads_before_written": (
        "every rank reads back the snapshot it would resume from, without waiting for rank 0 to write it",
        [(BARRIER, "                if os.path.exists(args.snapshot):  # the snapshot a restart would resume from\n"
                   "                    print(f\"rank {rank}: snapshot of step {torch.load(args.snapshot)['step']}\")\n")]),
    "wrong_snapshot_every_epoch": (
        "writes the snapshot at the end of every epoch, as lesson 4's script does, whatever --snapshot-every says",
        [("            if step % args.snapshot_every == 0:\n", "            if step % len(loader) == 0:\n")]),
    "wrong_no_resume": (
        "writes snapshots but never reads them: a restarted job starts over",
        [(LOAD, "    if False:\n")]),
    "wrong_resume_weights_only": (
        "restores everything but the optimizer",
        [('        optimizer.load_state_dict(snapshot["optimizer"])\n', "")]),
    "wrong_no_scheduler_state": (
        "restores everything but the learning-rate scheduler, which starts its schedule again",
        [('        scheduler.load_state_dict(snapshot["scheduler"])\n', "")]),
    "wrong_noise_not_restored": (
        "saves every rank's generator state but restores none: each generator starts again from its seed",
        [('        noise.set_state(snapshot["noise"][rank].cpu())\n', "")]),
    "wrong_noise_of_rank_0_everywhere": (
        "restores rank 0's generator state on every rank",
        [('        noise.set_state(snapshot["noise"][rank].cpu())\n', '        noise.set_state(snapshot["noise"][0].cpu())\n')]),
    "wrong_resume_at_epoch_start": (
        "goes on at the snapshot's epoch, from its first batch, though the snapshot was taken in the middle of it",
        [("        done = step - epoch * len(loader)  # batches of this epoch the snapshot had already trained\n",
          "        done = 0\n")]),
    "wrong_skips_batches_every_epoch": (
        "skips the batches the snapshot had trained in every epoch after the resume, not only in the first",
        [("    for epoch in range(step // len(loader), args.epochs):\n",
          "    skip = step % len(loader)\n    for epoch in range(step // len(loader), args.epochs):\n"),
         ("        done = step - epoch * len(loader)  # batches of this epoch the snapshot had already trained\n",
          "        done = skip\n")]),
    "wrong_set_epoch_counts_from_the_resume": (
        "resumes at the right step, but numbers the sampler's epochs from the resume",
        [("    for epoch in range(step // len(loader), args.epochs):\n        sampler.set_epoch(epoch)\n",
          "    first_epoch = step // len(loader)\n    for epoch in range(first_epoch, args.epochs):\n"
          "        sampler.set_epoch(epoch - first_epoch)\n")]),
}
