"""Exercise 4.4's planted bugs, one at a time: each is the fixed script with one bug put back (see ../edits.py).
given_buggy.py, the script handed out, has all four."""

BASE = "correct_fixed.py"
IN_PLACE_OLD = ('    handle, partial = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), suffix=".partial")\n    with os.fdopen(handle, "wb") as out:\n        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, out)\n    os.replace(partial, path)\n')
IN_PLACE_NEW = ('    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)\n')

MISTAKES = {
    "wrong_writer_from_local_rank_flag": (
        "decides the writer by a --local_rank flag, which torchrun never passes",
        [('    parser.add_argument("--snapshot", default="snapshot.pt")\n',
          '    parser.add_argument("--snapshot", default="snapshot.pt")\n'
          '    parser.add_argument("--local_rank", type=int, default=0)\n'),
         ("    is_main = rank == 0\n", "    is_main = args.local_rank == 0\n")]),
    "wrong_writer_from_local_rank_env": (
        "decides the writer by LOCAL_RANK: right on one machine, one writer per machine on several",
        [("    is_main = rank == 0\n", "    is_main = local_rank == 0\n")]),
    "wrong_optimizer_not_restored": (
        "restores the model and the epoch from the snapshot, not the optimizer",
        [('    optimizer.load_state_dict(snapshot["optimizer"])\n', "")]),
    "wrong_no_set_epoch": (
        "never calls set_epoch: every epoch repeats one order",
        [("        sampler.set_epoch(epoch)\n", "")]),
    "wrong_schedule_dropped": (
        "fixes the four bugs but drops the learning-rate schedule, as lesson 4's script has none",
        [('        for group in optimizer.param_groups:\n            group["lr"] = args.lr * 0.5 ** epoch  # the learning rate halves every epoch\n', "")]),
    "wrong_schedule_counts_from_the_resume": (
        "halves the learning rate by the epochs this attempt has run, so a resumed job starts again at the full rate",
        [('group["lr"] = args.lr * 0.5 ** epoch ', 'group["lr"] = args.lr * 0.5 ** (epoch - start) ')]),
    "wrong_snapshot_in_place": (
        "writes the snapshot straight onto its path",
        [(IN_PLACE_OLD, IN_PLACE_NEW)]),
}
