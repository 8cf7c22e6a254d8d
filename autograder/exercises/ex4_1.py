"""Exercise 4.1: one training script for every launch, graded under the real torchrun.

The script handed out is lesson 2's kind: it runs only under torchrun (it reads RANK from the
environment unconditionally) and its settings are constants. The student makes it run unchanged as
``python train.py`` and under ``torchrun`` with any number of processes, with its settings from its
command line. The grader launches it five times (python; torchrun with 1, 2 and 3 processes; two
agents of one job, as on two machines) with settings other than the script's defaults, and checks that
each launch trains the same model as one process on the same global batches; and once more as
``python train.py`` with no arguments, which must train with the defaults the script was handed out with.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import torch

from autograder import jobs
from autograder.checks import Check, drawn_shares, matches_reference, params_identical_across_ranks, runs_to_the_end, \
    shares_disjoint_and_covering
from autograder.exercises import Exercise
from autograder.exercises.ex2_2 import _checkpoint
from autograder.hints import Hint
from autograder.reference import flat, sampler_shares, trained_on_shares
from ddpcourse import TinyNet, make_model, toy_dataset

N, EPOCHS, GLOBAL_BATCH, LR, MOMENTUM, OUT = 96, 3, 12, 0.05, 0.9, "trained.pt"
# What the grader passes: none of it is the script's default (2 epochs, batches of 16, lr 0.1, weights.pt).
ARGS = ("--epochs", str(EPOCHS), "--global-batch", str(GLOBAL_BATCH), "--lr", str(LR), "--out", OUT)
DEFAULT_EPOCHS, DEFAULT_GLOBAL_BATCH, DEFAULT_LR, DEFAULT_OUT = 2, 16, 0.1, "weights.pt"  # the script handed out
DEFAULTS = "python, no arguments"
JOBS = (jobs.python(ARGS), jobs.standalone(1, ARGS), jobs.standalone(2, ARGS), jobs.standalone(3, ARGS),
        jobs.python((), name=DEFAULTS))
TWO_MACHINES = "torchrun, 2 machines of 1 process"


@functools.cache
def reference(epochs: int = EPOCHS, global_batch: int = GLOBAL_BATCH, lr: float = LR) -> torch.Tensor:
    """One process, SGD with momentum, on the global batches every launch draws: DistributedSampler's
    order for (seed 0, epoch) is one permutation, and the ranks' k-th batches together are its k-th
    slice of GLOBAL_BATCH samples, whatever the number of ranks."""
    dataset = toy_dataset(n=N, seed=0)
    shares = [sampler_shares(dataset, 1, epoch) for epoch in range(epochs)]
    return flat(trained_on_shares(lambda: make_model(0), dataset, shares, global_batch, lr, momentum=MOMENTUM))


def _with_arguments(verify):
    """A check of the launches with the grader's command line: the one with none has a check of its own."""
    return lambda runs: verify(replace(runs, worlds=[w for w in runs if w.job != DEFAULTS]))


def _defaults_kept(runs):
    world = next((w for w in runs if w.job == DEFAULTS), None)
    if world is None:
        return None
    r = world.ranks[0]
    epochs = len(r.of("sampler_iter"))
    if epochs and epochs != DEFAULT_EPOCHS:
        return f"{world.label}: the script trained {epochs} epochs; its default was {DEFAULT_EPOCHS}"
    saved = [Path(p).name for p in map(r.where_it_ended, r.of("save")) if p]
    if saved and DEFAULT_OUT not in saved:
        return f"{world.label}: the weights went to {saved[-1]}; the default file was {DEFAULT_OUT}"
    one_process = replace(runs, worlds=[w for w in runs if w.job == jobs.PYTHON])
    if not one_process.worlds or _same_model_every_launch(one_process):
        return None  # one process with arguments already trains wrong: that mistake is charged there
    # (a mistake that shows only with several processes, a sampler's rank say, cannot change the run of one)
    final = r.final_params()
    want = reference(DEFAULT_EPOCHS, DEFAULT_GLOBAL_BATCH, DEFAULT_LR)
    if final is not None and not torch.allclose(final, want, atol=1e-5):
        return (f"{world.label}: the trained weights differ from the script's defaults (lr {DEFAULT_LR}, "
                f"{DEFAULT_EPOCHS} epochs of global batches of {DEFAULT_GLOBAL_BATCH}) by up to "
                f"{(final - want).abs().max().item():.3g}: the defaults must stay the constants the script had")


def place(world, r) -> tuple[int, int, int]:
    """(RANK, LOCAL_RANK, WORLD_SIZE) the launcher gave this worker: torchrun's variables, or 0, 0, 1 under python."""
    env = (r.first("worker") or {}).get("env") or {}
    if not env.get("RANK"):
        return 0, 0, 1
    return int(env["RANK"]), int(env.get("LOCAL_RANK") or 0), int(env.get("WORLD_SIZE") or 1)


def under_python(world) -> bool:
    return world.job in (jobs.PYTHON, DEFAULTS)


def _work(runs):
    trained = [len(r.of("sampler_iter")) for w in runs for r in w.ranks]
    if not any(trained) and not any(r.of("optimizer_step") for w in runs for r in w.ranks):
        return "no launch took a single optimizer step"
    if EPOCHS not in trained:
        return (f"no launch trained the {EPOCHS} epochs its command line asked for (--epochs {EPOCHS}): the settings "
                "are still the script's constants. Read them with argparse")


def _spawned(r) -> dict | None:
    return next((e for e in r.of("enter") if e.get("call") in ("mp.spawn", "start_processes")), None)


def moved_meeting_place(world) -> str | None:
    """A worker that joined its group elsewhere than where its agent told it (its script set MASTER_ADDR or
    MASTER_PORT): on one machine every address is this one, on a cluster the group is at the first machine.
    Where the job did not complete, its "runs to the end" says why (a worker waiting at a port of its own)."""
    if not world.complete:
        return None
    for r in world.ranks:
        env = (r.first("worker") or {}).get("env") or {}
        told = f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        used = next((e.get("master") for e in r.of("enter") if e.get("call") == "init_process_group"), None)
        if env.get("MASTER_ADDR") and used and used != told:
            return (f"{world.label}: rank {r.rank} joined its group at {used}, not where its agent told it "
                    f"(MASTER_ADDR:MASTER_PORT {told}): the script sets them itself. On a cluster the group is at "
                    "the first machine, and the workers of the other machine would look for it where the script "
                    "says; leave both to torchrun")
    return None


def _one_group_at_the_launchers_place(runs):
    for world in runs:
        moved = moved_meeting_place(world)
        if moved:
            return moved
        for r in world.ranks:
            spawn = _spawned(r)
            if spawn is not None:
                started = ("under plain python the script is a job of one process, and under torchrun one of the "
                           "processes torchrun started" if under_python(world) else
                           "torchrun already started one process per rank, so each of them started more")
                return (f"{world.label}: rank {r.rank} called mp.spawn ({spawn.get('caller')}): {started}. "
                        "Let the launcher start the processes: no mp.spawn")
            rank, _, size = place(world, r)
            asked = r.first("init_process_group_called")
            joined = r.first("init_process_group")
            if under_python(world):
                if joined is not None and joined.get("world_size") != 1:
                    return (f"{world.label}: the process joined a group of {joined.get('world_size')}: under plain "
                            "python the script is a job of one")
                continue
            if asked is None and size == 1:
                continue  # a job of one needs no group, under torchrun as under python
            if asked is None:
                return (f"{world.label}: rank {r.rank} never called init_process_group: under torchrun with "
                        f"WORLD_SIZE {size} each worker joins the job's process group")
            forced = {k: asked[k] for k in ("rank", "world_size") if k in asked}
            if forced and forced != {"rank": rank, "world_size": size}:
                return (f"{world.label}: rank {r.rank} called init_process_group with "
                        f"{', '.join(f'{k}={v}' for k, v in forced.items())}, but torchrun made this worker RANK {rank} "
                        f"of WORLD_SIZE {size}: read them from the environment (or pass neither)")
            if joined is not None and (joined.get("rank"), joined.get("world_size")) != (rank, size):
                return (f"{world.label}: rank {r.rank} joined as rank {joined.get('rank')} of "
                        f"{joined.get('world_size')}, not as torchrun's RANK {rank} of WORLD_SIZE {size}")


def _own_share_of_the_data(runs):
    for world in runs:
        problem = _share_problem(world)
        if problem:
            return problem


def _share_problem(world) -> str | None:
    """Why the ranks of this launch did not draw the launcher's shares of the data, or None."""
    for r in world.ranks:
        rank, _, size = place(world, r)
        drawn = r.of("sampler_iter")
        if not drawn:
            return (f"{world.label}: rank {r.rank} drew no samples from a DistributedSampler. Use one in every "
                    "launch, under python too (num_replicas=1, rank=0): then the order of the samples depends "
                    "only on the seed and the epoch, and every launch trains on the same global batches")
        given = (drawn[0].get("sampler_rank"), drawn[0].get("num_replicas"))
        if given != (rank, size):
            return (f"{world.label}: rank {r.rank}'s DistributedSampler was given rank={given[0]}, "
                    f"num_replicas={given[1]}, but the launcher made this process rank {rank} of {size}."
                    f"{_why_not_the_launchers(world, r, given)}")
    epochs = min(len(r.of("sampler_iter")) for r in world.ranks)
    for epoch in range(epochs):
        shares = {r.rank: r.of("sampler_iter")[epoch].get("indices", []) for r in world.ranks}
        problem = shares_disjoint_and_covering(shares, N, world.world_size, f"{world.label}, epoch {epoch}")
        if problem:
            return problem


def _why_not_the_launchers(world, r, given) -> str:
    """What the sampler's rank and size were, if they were not the job's (given: rank, num_replicas)."""
    rank, local, size = place(world, r)
    env = (r.first("worker") or {}).get("env") or {}
    if given[0] == local != rank:
        return (" That is its LOCAL_RANK, its place on its own machine: the workers of every machine then draw the "
                "same shares. The sampler needs the place in the whole job, RANK")
    if given[0] == 0 and rank != 0:
        return (" Every rank took rank 0: a --local_rank argument keeps its default under torchrun, which passes "
                "none. Read RANK and LOCAL_RANK from the environment")
    if given[1] != size and str(given[1]) == env.get("LOCAL_WORLD_SIZE") and world.layout.nodes > 1:
        return " That is LOCAL_WORLD_SIZE, the workers of one machine: the job has WORLD_SIZE"
    if given[1] != size:
        return " A world size written into the script is wrong for every other launch: read WORLD_SIZE"
    return ""


def _settings_from_the_command_line(runs):
    for world in runs:
        for r in world.ranks:
            _, _, size = place(world, r)
            passes = len(r.of("sampler_iter"))  # the epochs trained; their order is the data's concern
            if passes and passes != EPOCHS:  # no sampler at all: the data check says so
                return (f"{world.label}: rank {r.rank} went through its data {passes} time(s), but the command line "
                        f"said --epochs {EPOCHS}")
            batches = {e.get("batch_size") for e in r.of("dataloader") if e.get("batch_size")}
            if batches and batches != {GLOBAL_BATCH // size}:
                return (f"{world.label}: rank {r.rank} loads batches of {sorted(batches)[0]}, but --global-batch "
                        f"{GLOBAL_BATCH} is all ranks together: {GLOBAL_BATCH // size} per rank with {size} process(es)")
        saved = [Path(p).name for p in map(world.ranks[0].where_it_ended, world.ranks[0].of("save")) if p]
        if saved and OUT not in saved:
            return f"{world.label}: rank 0 saved to {saved[-1]}, not to the file the command line named (--out {OUT})"


def _same_model_every_launch(runs):
    want = reference()

    def expected(world) -> torch.Tensor:
        """Where the ranks drew other shares than the launcher's (the share check's mistake, charged there), one
        process trained on the batches they drew; else one process on the launcher's global batches."""
        shares = drawn_shares(world, N, EPOCHS) if world.world_size > 1 and _share_problem(world) else None
        if shares is None:
            return want
        return flat(trained_on_shares(lambda: make_model(0), toy_dataset(n=N, seed=0), shares,
                                      GLOBAL_BATCH // world.world_size, LR, momentum=MOMENTUM))

    return matches_reference(runs, expected,
                             f"one process trained with --lr {LR} (SGD, momentum {MOMENTUM}) on the same global batches")


def _one_writer(runs):
    for world in runs:
        writers = sorted({r.rank for r in world.ranks if r.of("save")})
        if writers == [0]:
            continue
        firsts = sorted(r.rank for r in world.ranks if place(world, r)[1] == 0)
        per_machine = (" One writer per machine: those are the LOCAL_RANK 0 workers, and every machine has one. "
                       "RANK 0 is one worker in the whole job" if len(writers) > 1 and writers == firsts else "")
        return (f"{world.label}: torch.save was called by rank(s) {writers or 'none'}; exactly one writer, "
                f"global rank 0, is expected.{per_machine}")


def _file_holds_the_trained_model(runs):
    names = [name for name, _ in TinyNet().named_parameters()]
    want = list(TinyNet().state_dict())
    for world in runs:
        state, problem = _checkpoint(world)
        if problem:
            return problem
        if sorted(state["keys"]) != sorted(want):
            return (f"{world.label}: {OUT} holds keys {state['keys'][:3]}, not a plain TinyNet's state_dict "
                    "(save the model itself, not the DDP wrapper)")
        saved = torch.cat([torch.from_numpy(state["arrays"][n]).flatten() for n in names])
        final = world.ranks[0].final_params()
        if final is None or saved.shape != final.shape or not torch.allclose(saved, final, atol=1e-6):
            return f"{world.label}: {OUT} does not hold the final trained weights: save after the last epoch"


def _destroyed(runs):
    for world in runs:
        for r in world.ranks:
            if r.of("init_process_group") and not r.of("destroy_process_group"):
                return f"{world.label}: rank {r.rank} never called destroy_process_group()"


def _gpu_of_the_local_rank(runs):
    for world in runs:
        for r in world.ranks:
            ddp = r.first("ddp")
            _, local, _ = place(world, r)
            if ddp and ddp.get("param_device") != f"cuda:{local}":
                return (f"{world.label}: rank {r.rank} (LOCAL_RANK {local}) trains on {ddp.get('param_device')}: "
                        f"each worker uses the GPU of its LOCAL_RANK")


# check -> its hints; 4.3 uses those of the checks it shares with this exercise.
HINTS = {
    "group": Hint(
        idea="Under torchrun each worker is already started and told its place in the job (RANK and WORLD_SIZE in its "
             "environment): it joins the job's process group once, as that rank. Under plain python the script is "
             "a job of one and joins no group.",
        section="2. One script for every launch",
        where="Look at the top of your script, where it decides whether a launcher started it and joins the process "
              "group.",
        how="Join the group only when the launcher's variables are set, and leave the rank and the world size to "
            "the environment instead of passing numbers of your own. Start no processes yourself: the launcher "
            "already started one per rank.",
        lines_of=("init_process_group",)),
    "share": Hint(
        idea="Each launch splits every epoch's samples among its ranks by the place the launcher gave each one, in "
             "an order that depends only on the seed and the epoch; under plain python the one process draws them "
             "all, in that same order.",
        section="2. One script for every launch",
        where="Look where your script builds its sampler, and where the rank and the number of replicas it gives "
              "the sampler come from.",
        how="Use a DistributedSampler in every launch, under plain python too, given the job-wide RANK and "
            "WORLD_SIZE from the environment, with a job of one as the default when they are not set. LOCAL_RANK "
            "only picks the device, and an argument the launcher never passes keeps its default."),
    "settings": Hint(
        idea="The grader passes --epochs, --global-batch and --out on the command line: the script must train that "
             "many epochs, split that many samples per step among its ranks, and write to that file.",
        section="2. One script for every launch",
        where="Look at your argument parser and at where its values are used: the epoch loop, the batch size of the "
              "DataLoader and the path rank 0 saves to.",
        how="Read every setting with argparse and use the parsed values in place of the constants. --global-batch "
            "counts all ranks together, so each rank loads its part of it: the global batch divided by the world "
            "size.",
        lines_of=("set_epoch", "save")),
    "identical": Hint(
        idea="Under torchrun each rank computes gradients on its own share of the batch; DDP averages them across "
             "the ranks in the backward pass, so every rank takes the same step and the replicas stay equal.",
        section="2:5. Wrapping the model in DDP",
        where="Look where your script builds the model it trains under torchrun, and at what the forward and "
              "backward of your training loop go through.",
        how="When a launcher started the script, wrap the model in DistributedDataParallel once it is on its device, "
            "and train through the wrapper; under plain python train the model itself."),
    "same_model": Hint(
        idea="With the same global batches, the same starting model and the same optimizer, every launch trains the "
             "weights one process trains, up to float rounding: the grader compares each launch with that.",
        section="2. One script for every launch",
        where="Look at what your training uses besides the data: the model you build, the optimizer and its "
              "settings, the loss, and the learning rate from the command line.",
        how="Keep the training of the script handed out: the seeded model, SGD with momentum at the learning rate "
            "of --lr, cross-entropy, and each rank its share of every global batch. If the checks above fail too, "
            "fix them first: they often cause this one."),
    "writer": Hint(
        idea="The ranks hold the same weights, so one process writes the file for the whole job: global rank 0, in "
             "every launch.",
        section="2:7. Saving a checkpoint: once, from rank 0, without `module.`",
        where="Look at the condition in front of your torch.save, and at which rank it tests.",
        how="Let only the process whose global rank is 0 write, with rank 0 as the default under plain python. "
            "LOCAL_RANK 0 exists once on every machine, so testing it gives one writer per machine.",
        lines_of=("save",)),
    "file": Hint(
        idea="The file must hold the final trained weights under the plain model's names, so that a TinyNet can "
             "load it without DDP.",
        section="2:7. Saving a checkpoint: once, from rank 0, without `module.`",
        where="Look at what your torch.save is given, and where in the script it runs.",
        how="Save the state dict of the model itself, not of the DDP wrapper (whose keys start with module.), and "
            "save it after the last epoch, so that it holds the final weights.",
        lines_of=("save",)),
    "destroyed": Hint(
        idea="A rank that joined a process group leaves it when it is done with communication, so that it exits "
             "cleanly.",
        section="2:8. `destroy_process_group()` at the end",
        where="Look at the end of your script, on the path a torchrun launch takes.",
        how="Once the training and the save are done, have every rank that joined the group call "
            "destroy_process_group; under plain python there is no group to leave.",
        lines_of=("destroy_process_group",)),
    "defaults": Hint(
        idea="Run with no arguments, the script must train exactly as the script handed out did: its constants "
             "become the defaults of the command line.",
        section="2. One script for every launch",
        where="Look at the default of each option in your argument parser, and compare it with the constant it "
              "replaced.",
        how="Give each option the value of the constant it replaces as its default: the epochs, the global batch, "
            "the learning rate and the file name of the script handed out."),
    "gpu": Hint(
        idea="On a machine with GPUs each worker claims the GPU of its place on that machine, LOCAL_RANK, not of its "
             "place in the whole job.",
        section="2:4. One device per process",
        where="Look where your script chooses its device, and which rank it uses for that.",
        how="Pick the device from LOCAL_RANK, read from the environment, and put the model and every batch on it; "
            "under plain python the one process takes the first device."),
}


EXERCISE = Exercise(
    id="4.1",
    title="one script for every launch",
    kind="script",
    jobs=JOBS,
    # and as two agents of one job, as on two machines, on a rendezvous of its own each grading
    jobs_of=lambda code: (*JOBS, jobs.machines(2, 1, ARGS, name=TWO_MACHINES)),
    timeout=60.0,
    warm_imports=jobs.WARM_IMPORTS,
    expected=lambda seed: {"initial": flat(make_model(0))},
    work=_work,
    checks=[
        runs_to_the_end("every launch runs to the end: python, torchrun with 1, 2 and 3 processes, on 2 machines, and "
                        "with no arguments", 3),
        Check("under torchrun each worker joins one process group at the rank and size torchrun gave it", 2,
              _with_arguments(_one_group_at_the_launchers_place), needs="partial", hint=HINTS["group"]),
        Check("each rank draws its own share of the data: the launcher's rank and world size", 2,
              _with_arguments(_own_share_of_the_data), hint=HINTS["share"]),
        Check("settings from the command line: --epochs, --global-batch (all ranks together) and --out", 2,
              _with_arguments(_settings_from_the_command_line), hint=HINTS["settings"]),
        Check("parameters identical on all ranks after every optimizer step", 1, _with_arguments(params_identical_across_ranks),
              hint=HINTS["identical"]),
        Check("every launch trains the same model as one process on the same global batches", 3,
              _with_arguments(_same_model_every_launch), hint=HINTS["same_model"]),
        Check("exactly one writer in every launch: global rank 0", 1, _with_arguments(_one_writer),
              hint=HINTS["writer"]),
        Check("the file saved holds the trained weights of a plain TinyNet", 1, _with_arguments(_file_holds_the_trained_model),
              hint=HINTS["file"]),
        Check("process group destroyed at the end of every torchrun launch", 1, _with_arguments(_destroyed),
              hint=HINTS["destroyed"]),
        Check("with no arguments it trains with the defaults the script had: 2 epochs, global batches of 16, lr 0.1, "
              "into weights.pt", 2, _defaults_kept, hint=HINTS["defaults"]),
        Check("on GPUs each worker trains on the GPU of its LOCAL_RANK", 1, _with_arguments(_gpu_of_the_local_rank), gpu_only=True,
              hint=HINTS["gpu"]),
    ],
)
