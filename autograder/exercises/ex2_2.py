"""Exercise 2.2: a complete DDP training script, launched as torchrun launches it."""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from autograder.checks import (
    CAUSE,
    FIX,
    Check,
    each_rank,
    every_rank_calls_the_same_collectives,
    matches_reference,
    params_identical_across_ranks,
    runs_to_the_end,
    shares_disjoint_and_covering,
    writers_saves,
)
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.launch import Layout
from autograder.reference import ddp_training, flat, nearest_samples, training_on_shares
from ddpcourse import TinyNet, make_model, toy_dataset

N, EPOCHS, BATCH, LR = 96, 3, 8, 0.1
ORDER = "the order of the samples changes every epoch (set_epoch(epoch) at the top of each)"


@functools.cache
def reference(world_size: int) -> torch.Tensor:
    return ddp_training(toy_dataset(n=N, seed=0), world_size, EPOCHS, BATCH, LR)


def drawn_reference(world) -> torch.Tensor:
    """The reference trained on the global batches the ranks actually drew from their samplers, or, without
    samplers, on the batches each rank's model was given, told by their rows.

    So a mistake in what the ranks drew (no set_epoch, no shuffling, no sampler) is charged by the check
    that names it, not again here, and training wrong on those batches still shows. Ranks that went
    through their samplers unequally often get the course's reference.
    """
    iters = [r.of("sampler_iter") for r in world.ranks]
    if not all(iters):
        fed = _fed_batches(world)
        return training_on_shares(toy_dataset(n=N, seed=0), fed, N, LR) if fed else reference(world.world_size)
    if len({len(i) for i in iters}) != 1:
        return reference(world.world_size)
    batch = next((e["batch_size"] for r in world.ranks for e in r.of("dataloader") if e.get("batch_size")), BATCH)
    shares = [[[int(i) for i in it[epoch]["indices"]] for it in iters] for epoch in range(len(iters[0]))]
    return training_on_shares(toy_dataset(n=N, seed=0), shares, batch, LR)


def _fed_batches(world) -> list[list[list[int]]] | None:
    """Each training step's batch on every rank, as dataset indices, from the rows DDP's forward was given
    ([step][rank] -> indices); None where a row is no sample of the dataset or the ranks stepped unequally."""
    dataset = toy_dataset(n=N, seed=0)
    per_rank = []
    for r in world.ranks:
        steps = []
        for e in r.of("ddp_forward"):
            if not e.get("sync") or not e.get("inputs"):
                continue
            indices, farthest = nearest_samples(e["inputs"], dataset)
            if farthest > 1e-5:
                return None
            steps.append(indices)
        per_rank.append(steps)
    if not per_rank or len({len(s) for s in per_rank}) != 1 or not per_rank[0]:
        return None
    return [[steps[k] for steps in per_rank] for k in range(len(per_rank[0]))]


def _work(runs):
    if not any(r.of("init_process_group") for w in runs for r in w.ranks):
        return ("no rank joined a process group: this is still a single-process script, run once in every "
                "process, each training alone on the whole dataset")
    if not any(r.of("optimizer_step") for w in runs for r in w.ranks):
        return "no rank took a single optimizer step"


def _backend(runs):
    for world, r in each_rank(runs):
        init = r.first("init_process_group")
        if init is None:
            return f"{world.label}: rank {r.rank} never initialized a process group"
        # no backend named: PyTorch gives the group gloo for CPU tensors and nccl for GPU ones, both right
        chosen = init["backend"] if init.get("requested_backend") not in (None, "None") else runs.backend
        if chosen != runs.backend or init["world_size"] != world.world_size:
            return (f"{world.label}: rank {r.rank} joined a {init['backend']} group of "
                    f"{init['world_size']} process(es)")


def _wrapped_in_ddp(runs):
    for world, r in each_rank(runs):
        if not r.of("ddp"):
            return f"{world.label}: rank {r.rank} never wrapped its model in DistributedDataParallel"


def _ddp_device_ids(runs):
    for world, r in each_rank(runs):
        ddp = r.first("ddp")
        want = [f"cuda:{world.layout.local_rank(r.rank)}"]
        if ddp and [d if d.startswith("cuda") else f"cuda:{d}" for d in ddp["device_ids"] or []] != want:
            return f"rank {r.rank}: DDP(device_ids={ddp['device_ids']}), expected {want}"


def _samples(runs):
    for world in runs:
        iters = {r.rank: r.of("sampler_iter") for r in world.ranks}
        if not all(iters.values()):
            return (f"{world.label}: no DistributedSampler was iterated on rank "
                    f"{min(k for k, v in iters.items() if not v)}: every rank trained on the whole dataset")
        for epoch in range(min(len(v) for v in iters.values())):
            shares = {rank: it[epoch]["indices"] for rank, it in iters.items()}
            message = shares_disjoint_and_covering(shares, N, world.world_size, f"{world.label}, epoch {epoch}")
            if message:
                return message


def _drew_from_samplers(runs) -> bool:
    """Every rank of every launch iterated a DistributedSampler (else the samples check names that)."""
    return all(r.of("sampler_iter") for _, r in each_rank(runs))


def _order_changes_every_epoch(runs):
    """Observed in the orders each rank drew, epoch after epoch: a repeated order is the mistake, whatever
    caused it (the message names the likely cause after what was seen)."""
    if not _drew_from_samplers(runs):
        return None  # no sampler at all: "each epoch the ranks' samples ..." names that mistake
    for world, r in each_rank(runs):
        iters = r.of("sampler_iter")
        if len(iters) != EPOCHS:
            return f"{world.label}: rank {r.rank} went through its sampler {len(iters)} times, expected {EPOCHS}"
        orders = [[int(i) for i in it["indices"]] for it in iters]
        repeated = next((e for e in range(1, EPOCHS) if orders[e] == orders[e - 1]), None)
        if repeated is not None:
            return (f"{world.label}: rank {r.rank} drew the same samples in the same order in epochs "
                    f"{repeated - 1} and {repeated}{CAUSE}{_why_repeated(r, iters, repeated)}")


def _why_repeated(r, iters, repeated: int) -> str:
    """The likely cause of epochs ``repeated - 1`` and ``repeated`` drawing the same order, from the epoch number
    each iteration of the sampler ran under (what set_epoch had set by then)."""
    if not all(it.get("shuffle") for it in iters):
        return "its DistributedSampler was built with shuffle=False, so no epoch number changes the order"
    called = [e.get("epoch") for e in r.of("set_epoch")]
    if not called:
        return "set_epoch was never called, so the sampler shuffles with the same seed every epoch"
    under = [it.get("epoch") for it in iters]
    if len(set(called)) == len(called) and under[:repeated + 1] != sorted(called)[:repeated + 1]:
        return (f"set_epoch was called with {called}, but the sampler was read under epoch numbers {under}: each "
                "call came after that epoch's loader was read, so it changed only the next epoch's order")
    return f"set_epoch was called with {called}, so the sampler shuffled with the same seed twice"


def _batch_per_rank(runs):
    """Each rank's training batches, as DDP's forward received them: BATCH rows (the last one of an epoch may be short)."""
    for world, r in each_rank(runs):
        rows = [e["rows"] for e in r.of("ddp_forward") if e.get("sync") and isinstance(e.get("rows"), int)]
        if rows and max(rows) != BATCH:
            return (f"{world.label}: rank {r.rank}'s model was given batches of {max(rows)} samples, expected "
                    f"{BATCH}: BATCH_SIZE is what each process takes per step (the global batch is "
                    f"BATCH_SIZE x world size)")


def _one_writer(runs):
    for world in runs:
        writers = sorted({r.rank for r in world.ranks if r.of("save")})
        if writers != [0]:
            nodes = (f" ({world.layout.nodes} nodes of {world.layout.local_world_size}: local ranks "
                     f"{[world.layout.local_rank(w) for w in writers]})") if world.layout.nodes > 1 else ""
            return (f"{world.label}{nodes}: torch.save was called by rank(s) {writers or 'none'}{FIX}"
                    "exactly one writer, global rank 0")


def _checkpoint(world):
    """What rank 0 saved last, as the grader read it back: (keys, float tensors by key), or a problem."""
    _, saves = writers_saves(world)
    if not saves:
        return None, f"{world.label}: rank 0 saved nothing to a file"
    # the model's file, where rank 0 also saved other things (an optimizer's state, a list of losses)
    path = next((e["path"] for e in reversed(saves) if _holds_the_model(world.exports.get(e["path"], {}))),
                saves[-1]["path"])
    found = world.exports.get(path, {})
    if found.get("error") == "missing":
        return None, f"the checkpoint {Path(path).name} was not found after the run"
    if "error" in found or not found:
        why = f" ({found['error']})" if isinstance(found.get("error"), str) else ""
        return None, f"the checkpoint {Path(path).name} could not be read with torch.load(weights_only=True){why}"
    if found.get("type") != "dict":
        return None, f"the checkpoint holds a {found.get('type')}, not a state_dict"
    return found, None


def _holds_the_model(found: dict) -> bool:
    """Whether a file read back is a dictionary with TinyNet's weights in it (a 'module.' prefix or not)."""
    keys = {str(k).removeprefix("module.") for k in found.get("keys", ())} if found.get("type") == "dict" else set()
    return set(TinyNet().state_dict()) <= keys


def _loads_strictly(runs):
    for world in runs:
        state, problem = _checkpoint(world)
        if problem:
            return problem
        prefixed = [k for k in state["keys"] if k.startswith("module.")]
        if prefixed:
            return f"checkpoint keys start with 'module.' ({prefixed[0]}){CAUSE}the DDP wrapper was saved, not the model"
        want = dict(TinyNet().state_dict())
        missing = [k for k in want if k not in state["arrays"]]
        extra = [k for k in state["keys"] if k not in want]
        if missing or extra:
            return (f"the checkpoint does not load into a plain TinyNet: keys missing {missing[:3]}, "
                    f"unexpected {extra[:3]}")
        wrong = [k for k, v in want.items() if tuple(state["arrays"][k].shape) != tuple(v.shape)]
        if wrong:
            return f"the checkpoint does not load into a plain TinyNet: {wrong[0]} has the wrong shape"


def _checkpoint_is_trained(runs):
    for world in runs:
        state, problem = _checkpoint(world)
        if problem:
            return problem
        arrays = {k.removeprefix("module."): v for k, v in state["arrays"].items()}
        names = [name for name, _ in TinyNet().named_parameters()]
        if any(n not in arrays for n in names):
            return "the checkpoint cannot be read as TinyNet's parameters"
        saved = torch.cat([torch.from_numpy(arrays[n]).flatten() for n in names])
        final = writers_saves(world)[0].final_params()
        if final is None or saved.shape != final.shape or not torch.allclose(saved, final, atol=1e-6):
            return f"{world.label}: the checkpoint's weights are not the final trained weights"


def _destroyed(runs):
    for world, r in each_rank(runs):
        if not r.of("destroy_process_group"):
            return (f"{world.label}: rank {r.rank} ended with its process group still open{FIX}"
                    "destroy_process_group() at the end of the script")


def layout(world_size: int) -> Layout:
    """Even world sizes run as two simulated nodes, so that a local rank taken for the global one shows."""
    return Layout(world_size, nodes=2 if world_size % 2 == 0 else 1)


EXERCISE = Exercise(
    id="2.2",
    title="a complete DDP training script",
    kind="script",
    layout=layout,
    timeout=60.0,
    warm_imports=("torch._dynamo",),
    expected=lambda seed: {"initial": flat(make_model(0))},
    work=_work,
    checks=[
        runs_to_the_end("the script runs to the end on every rank", 2),
        Check("process group of the right backend and size", 1, _backend, hint=Hint(
            idea="Every process must join one group of all the job's processes, with the backend that fits the "
                 "machine: gloo on CPUs, nccl with a GPU for each process.",
            section="3. `init_process_group` comes first",
            where="The start of your script: the init_process_group call and the backend it is given.",
            how="Join the group once in every process, before anything else distributed, with the backend of the "
                "course's device rule (or no backend at all, which lets PyTorch choose); torchrun's environment gives "
                "the rank, the world size and the address, so pass none of those yourself.",
            lines_of=("init_process_group",))),
        Check("model wrapped in DistributedDataParallel", 2, _wrapped_in_ddp, hint=Hint(
            idea="DDP is what makes the processes train as one: it broadcasts rank 0's weights when it wraps the "
                 "model and averages the gradients in every backward pass.",
            section="5. Wrapping the model in DDP",
            where="Where your script builds the model, before the optimizer and the training loop.",
            how="Once the model is on its device, wrap it in DistributedDataParallel and train through the wrapper: "
                "the forward pass, and so the backward, must go through it, not through the plain model.")),
        Check("DDP on GPUs: device_ids=[local_rank]", 1, _ddp_device_ids, gpu_only=True, hint=Hint(
            idea="On GPUs, DDP must be told the one GPU this process owns: the GPU of its local rank.",
            section="5. Wrapping the model in DDP",
            where="The device ids your script gives DistributedDataParallel when it runs on GPUs.",
            how="Give DDP the GPU of this process's local rank as its only device id on GPUs, and no device ids on "
                "CPUs; the global rank names no GPU of a second machine.")),
        Check("each epoch the ranks' samples are disjoint and cover the dataset", 3, _samples, hint=Hint(
            idea="In every epoch the ranks must split the dataset, each sample on exactly one rank; a plain loader "
                 "gives every rank the whole dataset, so the job trains on the same samples several times a step.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="The DataLoader of your script, and the sampler it is given.",
            how="Give the loader a DistributedSampler over the dataset, which takes this rank and the world size from "
                "the process group, and let the sampler do the shuffling in place of the loader.")),
        Check(ORDER, 2, _order_changes_every_epoch, hint=Hint(
            idea="The sampler shuffles with its seed plus the epoch it was last told: unless it is told each new "
                 "epoch, every epoch repeats the first one's split and order.",
            section="6. `DistributedSampler`: a different share of the data for each rank",
            where="The top of your epoch loop, and how your DistributedSampler is built.",
            how="Keep the sampler's shuffling on, and on every rank tell the sampler the current epoch with set_epoch "
                "at the start of each epoch, before the loader is read.",
            lines_of=("set_epoch",))),
        Check("each process's batch is BATCH_SIZE samples", 1, _batch_per_rank, hint=Hint(
            idea="BATCH_SIZE is what each process takes per step; the global batch is BATCH_SIZE times the world "
                 "size.",
            section="Averaged, not summed: the global batch and the learning rate",
            where="The batch size your script gives its DataLoader.",
            how="Give the loader BATCH_SIZE unchanged, neither divided nor multiplied by the world size.")),
        Check("parameters identical on all ranks after every optimizer step", 2, params_identical_across_ranks,
              hint=Hint(
                  idea="The replicas stay identical only if they start equal and every step applies the same "
                       "averaged gradient; a step on a gradient that DDP did not average lets them drift apart.",
                  section="5. Wrapping the model in DDP",
                  where="Your training step: which model the forward and backward passes go through, and whether "
                        "every rank takes the same number of steps.",
                  how="Run the forward pass through the DDP wrapper so that its backward averages the gradients before "
                      "every optimizer step, and let every rank step once per batch of its equal share.")),
        Check("equal to the single-process reference trained on the same global batches", 3,
              # Judged on the batches the ranks drew from their samplers, or else on those their models were
              # given: a mistake in what was drawn is the samples check's; training on it wrong is this one's.
              lambda runs: matches_reference(runs, drawn_reference, "the reference"), hint=Hint(
                  idea="With averaged gradients, N processes of BATCH_SIZE samples train exactly as one process "
                       "would on global batches of N times BATCH_SIZE, at the same learning rate.",
                  section="Averaged, not summed: the global batch and the learning rate",
                  where="Your training step: the model it starts from, the loss, the optimizer and its learning "
                        "rate, and anything done to the gradients between backward and the step.",
                  how="Keep the single-process training as given (the same model seed, loss, optimizer and learning "
                      "rate, one step per batch) and let DDP alone average the gradients: no all-reduce of your "
                      "own on top, and no loss or learning rate scaled by the world size.")),
        Check("exactly one checkpoint writer: global rank 0", 2, _one_writer, hint=Hint(
            idea="The replicas are identical, so one process of the whole job writes the checkpoint: global rank 0. "
                 "Local rank 0 exists on every machine.",
            section="7. Saving a checkpoint: once, from rank 0, without `module.`",
            where="The condition around your torch.save.",
            how="Save only in the process whose global rank is 0, as the process group or RANK says; not in local "
                "rank 0, which every machine has, and not in every process.",
            lines_of=("save",))),
        Check("checkpoint keys have no 'module.' prefix and load strictly into the plain model", 2, _loads_strictly,
              hint=Hint(
                  idea="The checkpoint must be the plain model's state dict: the DDP wrapper's own state dict puts "
                       "`module.` before every key, which an unwrapped TinyNet does not accept.",
                  section="7. Saving a checkpoint: once, from rank 0, without `module.`",
                  where="What your torch.save writes: whose state dict, and what else goes into the file.",
                  how="Save the state dict of the model inside the wrapper (the one DDP keeps as its module, or the "
                      "plain model you wrapped), not the wrapper's own, and make that dictionary the whole content "
                      "of the file.",
                  lines_of=("save",))),
        Check("the checkpoint holds the trained weights", 1, _checkpoint_is_trained, hint=Hint(
            idea="The checkpoint is there to keep the weights that training ended with.",
            section="7. Saving a checkpoint: once, from rank 0, without `module.`",
            where="Where your save happens relative to the epoch loop, and which model's weights it writes.",
            how="Save after the last epoch has finished, from the model that was trained, so that the file holds its "
                "final weights rather than a copy taken earlier.",
            lines_of=("save",))),
        Check("process group destroyed at the end", 1, _destroyed, hint=Hint(
            idea="Every process leaves the process group when it is done: that releases the backend's threads and "
                 "connections and lets the process exit cleanly.",
            section="8. `destroy_process_group()` at the end",
            where="The end of your script, after training and saving.",
            how="On every rank, not only rank 0, destroy the process group as the script's last distributed step, "
                "after the save and any collective.",
            lines_of=("destroy_process_group",))),
        Check("every rank calls the same collectives (none inside `if rank == 0`)", 1,
              every_rank_calls_the_same_collectives, needs="partial", hint=Hint(
                  idea="A collective, a barrier too, completes only when every rank calls it, in the same order: one "
                       "that only rank 0 calls leaves the others waiting, or pairs up with the wrong call.",
                  section="10. Break it: ranks that disagree",
                  where="The collectives and barriers of your script, and any test of the rank around them (the "
                        "logging and saving blocks especially).",
                  how="Call every collective on all ranks, outside any branch on the rank; keep only the printing and "
                      "the saving inside rank 0's branch.",
                  lines_of=("collective",))),
    ],
)
