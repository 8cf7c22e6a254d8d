"""Exercise 4.3's negative controls that are one edit of a correct solution (see ../edits.py)."""

BASE = "correct_c10d.py"
C10D = ("torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT "
        "--rdzv-id=$JOB_ID train.py")
GIVEN = ('''    "torchrun --standalone --nproc-per-node=2 train.py",  # machine 0: how it runs on one machine
    "torchrun --standalone --nproc-per-node=2 train.py",  # machine 1
''')

MISTAKES = {
    "wrong_rdzv_id_per_machine": (
        "gives each machine a rendezvous id of its own",
        [('--rdzv-id=$JOB_ID train.py",  # 0', '--rdzv-id=machine0 train.py",  # 0'),
         ('--rdzv-id=$JOB_ID train.py",  # 1', '--rdzv-id=machine1 train.py",  # 1')]),
    "wrong_same_node_rank": (
        "gives both machines --node-rank=0 with the static rendezvous",
        [("--node-rank=1", "--node-rank=0")], "correct_static.py"),
    "wrong_one_node_each": (
        "tells each agent it is a job of one machine (--nnodes=1)",
        [('--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 0',
          '--nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 0'),
         ('--nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 1',
          '--nnodes=1 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 1')]),
    "wrong_processes_in_total": (
        "asks for 2 processes in all (--nproc-per-node=1), not 2 per machine",
        [('--nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 0',
          '--nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 0'),
         ('--nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 1',
          '--nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # 1')]),
    "wrong_writer_per_machine": (
        "saves on every LOCAL_RANK 0: one writer per machine",
        [("    if rank == 0:\n        torch.save", "    if local_rank == 0:\n        torch.save")]),
    "wrong_sampler_local_rank": (
        "gives the sampler LOCAL_RANK",
        [("rank=rank, shuffle", "rank=local_rank, shuffle")]),
    "wrong_script_as_given": (
        "runs the script handed out, unchanged, under right commands",
        [(GIVEN, f'    "{C10D}",\n    "{C10D}",\n')], "given_one_machine.py"),
}
MISTAKES["wrong_sets_master_addr"] = (
    "sets MASTER_ADDR to localhost before joining: machine 1's workers would look for the group on machine 1",
    [("        dist.init_process_group(backend)\n",
      "        os.environ[\"MASTER_ADDR\"] = \"localhost\"\n        dist.init_process_group(backend)\n")])
