"""Exercise 4.1's negative controls that are one edit of correct_argparse.py (see ../edits.py)."""

BASE = "correct_argparse.py"
PARSED = "    args = parser.parse_args()\n"
RANK = '    rank = int(os.environ.get("RANK", 0))\n'

MISTAKES = {
    "wrong_no_set_epoch": (
        "forgets sampler.set_epoch(epoch): every epoch draws the first epoch's order, on any launch",
        [("        sampler.set_epoch(epoch)\n", "")]),
    "wrong_sampler_local_rank": (
        "gives the sampler LOCAL_RANK: the same as RANK on one machine, a share drawn twice on two",
        [("rank=rank, shuffle", "rank=local_rank, shuffle")]),
    "wrong_sets_its_own_master_port": (
        "overwrites MASTER_ADDR and MASTER_PORT before joining: torchrun's agent hosts the store where it said",
        [("        dist.init_process_group(backend)\n",
          '        os.environ["MASTER_ADDR"] = "127.0.0.1"\n'
          '        os.environ["MASTER_PORT"] = str(int(os.environ["MASTER_PORT"]) + 1)\n'
          "        dist.init_process_group(backend)\n")]),
    "wrong_local_rank_argument": (
        "takes its rank from a --local_rank argument, the old launcher's way (torchrun passes none)",
        [(PARSED, '    parser.add_argument("--local_rank", type=int, default=0)\n' + PARSED),
         (RANK, "    rank = args.local_rank\n")]),
    "wrong_hard_coded_world_size": (
        "writes the world size into the script",
        [('    world_size = int(os.environ.get("WORLD_SIZE", 1))\n', "    world_size = 2\n")]),
    "wrong_global_batch_per_rank": (
        "loads --global-batch samples on every rank",
        [("batch_size=args.global_batch // world_size", "batch_size=args.global_batch")]),
    "wrong_python_path_shuffles": (
        "shuffles with a plain DataLoader when run without torchrun",
        [("    loader = DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler)\n",
          "    loader = (DataLoader(dataset, batch_size=args.global_batch // world_size, sampler=sampler) if distributed\n"
          "              else DataLoader(dataset, batch_size=args.global_batch, shuffle=True))\n")]),
    "wrong_barrier_on_rank0_only": (
        "waits in a barrier on rank 0 only, before saving",
        [("    if rank == 0:\n        torch.save(", "    if rank == 0:\n        if distributed:\n            dist.barrier()\n        torch.save(")]),
}
MISTAKES["wrong_defaults_changed"] = (
    "keeps the command line but not the script's constants as defaults: 6 epochs at lr 0.05, as lesson 4's script",
    [('    parser.add_argument("--epochs", type=int, default=2)\n', '    parser.add_argument("--epochs", type=int, default=6)\n'),
     ('    parser.add_argument("--lr", type=float, default=0.1)\n', '    parser.add_argument("--lr", type=float, default=0.05)\n')])
MISTAKES["wrong_sets_master_addr"] = (
    "sets MASTER_ADDR to localhost itself: right on one machine, on a cluster the other machines' workers look for the group on themselves",
    [("        dist.init_process_group(backend)\n",
      "        os.environ[\"MASTER_ADDR\"] = \"localhost\"\n        dist.init_process_group(backend)\n")])
