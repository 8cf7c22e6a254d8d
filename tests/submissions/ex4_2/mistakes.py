"""Exercise 4.2's negative controls that are one edit of correct_epoch_snapshots.py (see ../edits.py)."""

BASE = "correct_epoch_snapshots.py"
LOAD = "    if os.path.exists(args.snapshot):  # a restarted job: every rank loads the same, whole snapshot\n"

MISTAKES = {
    "correct_rank0_reads_and_broadcasts": (
        "rank 0 alone reads the snapshot and broadcasts what it read: every rank goes on from the same state",
        [(LOAD + "        snapshot = torch.load(args.snapshot, map_location=device)\n",
          "    found = [torch.load(args.snapshot, map_location=\"cpu\") if rank == 0 and os.path.exists(args.snapshot)\n"
          "             else None]\n"
          "    if distributed:\n"
          "        dist.broadcast_object_list(found, src=0)\n"
          "    if found[0] is not None:  # a restarted job: rank 0 read the snapshot, every rank got it\n"
          "        snapshot = found[0]\n")]),
    "wrong_moved_from_system_temp": (
        "writes the snapshot in the system's temporary directory, then shutil.move()s it: a copy across file systems",
        [("    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:\n",
          "    with tempfile.NamedTemporaryFile(delete=False) as tmp:\n"),
         ("    os.replace(tmp.name, path)\n", "    shutil.move(tmp.name, path)\n"),
         ("import tempfile\n", "import shutil\nimport tempfile\n")]),
    "correct_copied_beside_then_replaced": (
        "writes the snapshot in the system's temporary directory, copies it beside the snapshot, then os.replace()s",
        [("    with tempfile.NamedTemporaryFile(dir=directory, delete=False) as tmp:\n",
          "    with tempfile.NamedTemporaryFile(delete=False) as tmp:\n"),
         ("    os.replace(tmp.name, path)\n",
          "    beside = os.path.join(directory, '.snapshot.partial')\n    shutil.copy(tmp.name, beside)\n"
          "    os.remove(tmp.name)\n    os.replace(beside, path)\n"),
         ("import tempfile\n", "import shutil\nimport tempfile\n")]),
    "wrong_set_epoch_counts_from_the_resume": (
        "resumes at the right epoch, but numbers the sampler's epochs from the resume: set_epoch(epoch - first_epoch)",
        [("        sampler.set_epoch(epoch)\n", "        sampler.set_epoch(epoch - first_epoch)\n")]),
    "wrong_writer_local_rank": (
        "has the first process of every machine write the snapshot (LOCAL_RANK 0): one writer per machine",
        [("        if rank == 0:\n            save_snapshot(", "        if local_rank == 0:\n            save_snapshot(")]),
    "wrong_no_resume": (
        "writes snapshots but never reads them: a restarted job starts over",
        [(LOAD, "    if False:\n")]),
    "wrong_resume_weights_only": (
        "restores the weights and the epoch but not the optimizer",
        [('        optimizer.load_state_dict(snapshot["optimizer"])\n', "")]),
    "wrong_resume_from_epoch_0": (
        "restores the model and the optimizer but starts again at epoch 0",
        [('        first_epoch = snapshot["epoch"] + 1\n', "")]),
    "wrong_restart_count_as_epoch": (
        "takes TORCHELASTIC_RESTART_COUNT for the epoch to resume at",
        [('        first_epoch = snapshot["epoch"] + 1\n',
          '        first_epoch = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))\n')]),
    "wrong_reads_before_written": (
        "every rank reads back the snapshot it would resume from, without waiting for rank 0 to write it",
        [("        if distributed:\n            dist.barrier()  # the snapshot of this epoch is whole before any rank goes on\n",
          "        if os.path.exists(args.snapshot):  # the snapshot a restart would resume from\n"
          "            print(f\"rank {rank}: snapshot of epoch {torch.load(args.snapshot)['epoch']}\")\n")]),
    "wrong_every_rank_writes": (
        "writes the snapshot on every rank",
        [("        if rank == 0:\n            save_snapshot(", "        if True:\n            save_snapshot(")]),
    "wrong_written_in_place": (
        "writes the snapshot straight onto its path",
        [("    os.replace(tmp.name, path)\n", "    os.remove(tmp.name)\n"),
         ('        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, tmp)\n',
          '        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)\n')]),
}
