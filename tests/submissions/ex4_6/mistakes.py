"""Exercise 4.6's negative controls that are one edit of a correct solution (see ../edits.py), and one more
correct design written the same way (its name says so: it must pass)."""

BASE = "correct_torchrun.py"

MISTAKES = {
    "wrong_task_per_worker": (
        "asks srun for one task per worker (--ntasks-per-node=2): two torchrun agents on each node",
        [("#SBATCH --ntasks-per-node=1", "#SBATCH --ntasks-per-node=2")]),
    "wrong_endpoint_localhost": (
        "meets at localhost on a fixed port, as on one machine",
        [('--rdzv-endpoint="$head:$port"', "--rdzv-endpoint=localhost:29500")]),
    "wrong_fixed_rdzv_id": (
        "names the rendezvous after the script, not the job",
        [('--rdzv-id="$SLURM_JOB_ID"', "--rdzv-id=tinynet")]),
    "wrong_no_requeue": (
        "does not ask Slurm to requeue the job when it is preempted",
        [("#SBATCH --requeue\n", "")]),
    "wrong_no_sigterm_handler": (
        "snapshots only every --every steps: SIGTERM kills the workers in the middle of the run",
        [("    signal.signal(signal.SIGTERM, on_sigterm)\n", "")]),
    "wrong_stops_without_snapshot": (
        "stops on SIGTERM at the end of the step, but writes no snapshot of it",
        [("step % args.every == 0 or stop_now.item() > 0 or step == args.steps",
          "step % args.every == 0 or step == args.steps")]),
    "wrong_no_resume": (
        "writes snapshots but never loads one: the run after the requeue starts from scratch",
        [("    if os.path.exists(args.snapshot):\n", "    if False:\n")]),
    "correct_batch_host": (
        "meets at the batch script's own host: Slurm runs it on the job's first node",
        [('head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
          "head=$(hostname)  # the batch script runs on the job's first node")]),
}
