"""Exercise 3.2: a DDP training script whose model has batch norm, made synchronized.

The script handed out trains BNNet under DDP, each rank normalizing with its own batch of 4. The
student converts the batch norm layers before wrapping, so that a step equals one process's step
on the global batch, running statistics included. On CPUs the layers are the course's stand-in
(``ddpcourse.syncbn``), on GPUs PyTorch's ``nn.SyncBatchNorm`` on nccl.
"""

from __future__ import annotations

import functools

import torch

from autograder.checks import Check, each_rank, matches_reference, params_identical_across_ranks, runs_to_the_end
from autograder.exercises import Exercise
from autograder.exercises.ex2_2 import _checkpoint, _destroyed, _one_writer
from autograder.hints import Hint
from autograder.reference import flat, trained_on_shares
from ddpcourse import BNNet, make_bn_model, toy_dataset

N, EPOCHS, BATCH, LR = 96, 2, 4, 0.1
TOL = dict(rtol=1e-4, atol=1e-5)


def _norms(r, when: str) -> list[dict] | None:
    """The batch norm layers of the model DDP wrapped, as they were when it wrapped it ("ddp") or at the
    end ("buffers": when the model was freed or the process group destroyed, the last); None if the rank
    never got there."""
    event = r.first("ddp") if when == "ddp" else _final_buffers(r)
    return None if event is None else event.get("norms", [])


def _final_buffers(r) -> dict | None:
    found = r.of("buffers")
    return found[-1] if found else None


def _work(runs):
    if not any(r.of("ddp") for w in runs for r in w.ranks):
        return "no rank wrapped a model in DistributedDataParallel"
    synced = [n for _, r in each_rank(runs) for e in (r.first("ddp"), _final_buffers(r)) if e
              for n in e.get("norms", []) if n.get("synchronized")]
    if not synced:
        return ("no batch norm layer was ever synchronized: this is the script as given, each rank normalizing "
                "with its own batch's statistics")


def _synchronized_when_wrapped(runs):
    for world, r in each_rank(runs):
        wrapped, final = _norms(r, "ddp"), _norms(r, "buffers")
        if wrapped is None:
            return f"{world.label}: rank {r.rank} never wrapped its model in DDP"
        if not wrapped:
            return (f"{world.label}: the model DDP wrapped on rank {r.rank} has no batch norm "
                    "layers: train make_bn_model's BNNet")
        plain = [f"{n['name']} ({n['type']})" for n in wrapped if not n.get("synchronized")]
        if not plain:
            continue
        later = final is not None and all(n.get("synchronized") for n in final)
        if later:
            return (f"{world.label}: DDP wrapped the model on rank {r.rank} while {', '.join(plain)} "
                    "were plain batch norm; they were converted only after: convert first, then wrap (DDP "
                    "inspects the layers it wraps when it is built, and refuses nn.SyncBatchNorm in a CPU model)")
        return (f"{world.label}: inside the DDP model on rank {r.rank}, {', '.join(plain)} "
                f"{'is' if len(plain) == 1 else 'are'} not synchronized, so each rank normalizes with its own "
                "batch's statistics there")


def _drawn_shares(world) -> list[list[list[int]]] | None:
    """shares[epoch][rank]: the indices each rank's DistributedSampler gave it, or None without samplers."""
    iters = [r.of("sampler_iter") for r in world.ranks]
    if not all(iters) or len({len(i) for i in iters}) != 1:
        return None
    return [[[int(i) for i in it[epoch]["indices"]] for it in iters] for epoch in range(len(iters[0]))]


@functools.lru_cache(maxsize=16)
def _global_reference(key: tuple) -> torch.nn.Module:
    shares = [[list(share) for share in epoch] for epoch in key]
    return trained_on_shares(lambda: make_bn_model(0), toy_dataset(n=N, seed=0), shares, BATCH, LR, together=True)


def reference(world) -> torch.nn.Module | None:
    """One process trained on the global batches the ranks drew, each step's batch normalized as one."""
    shares = _drawn_shares(world)
    if shares is None:
        return None
    return _global_reference(tuple(tuple(tuple(s) for s in epoch) for epoch in shares))


def _no_sampler(world) -> str:
    return (f"{world.label}: the ranks did not all draw their samples from a DistributedSampler "
            "the same number of times, so the global batches they trained on are unknown")


def _equals_global_batch(runs):
    unknown = next((world for world in runs if reference(world) is None), None)
    if unknown is not None:
        return _no_sampler(unknown)
    return matches_reference(runs, lambda world: flat(reference(world)), "one process trained on the whole global batches")


def _running_statistics(runs):
    for world in runs:
        want = reference(world)
        if want is None:
            return _no_sampler(world)
        expected = {k: v.double() for k, v in want.named_buffers() if v.dtype.is_floating_point}
        for r in world.ranks:
            event = _final_buffers(r)
            held = event.get("values") if event else None
            if not isinstance(held, dict) or set(held) != set(expected):
                return (f"{world.label}: rank {r.rank}'s model at the end holds buffers "
                        f"{sorted(held or {})[:4]}, not BNNet's running statistics")
            for name, values in expected.items():
                got = torch.tensor(held[name], dtype=torch.float64)
                if got.shape != values.shape or not torch.allclose(got, values, **TOL):
                    gap = (got - values).abs().max().item() if got.shape == values.shape else float("nan")
                    return (f"{world.label}: rank {r.rank}'s {name} differs from one process's on "
                            f"the whole global batches by up to {gap:.3g}: the running statistics must come from "
                            "every rank's samples")


def _checkpoint_loads_and_holds_the_run(runs):
    want_keys = list(BNNet().state_dict())
    for world in runs:
        state, problem = _checkpoint(world)
        if problem:
            return problem
        if any(k.startswith("module.") for k in state["keys"]):
            return "checkpoint keys start with 'module.': the DDP wrapper was saved, not the model"
        if sorted(state["keys"]) != sorted(want_keys):
            missing = [k for k in want_keys if k not in state["keys"]]
            extra = [k for k in state["keys"] if k not in want_keys]
            return f"the checkpoint does not load into a plain BNNet: keys missing {missing[:3]}, unexpected {extra[:3]}"
        names = [n for n, _ in BNNet().named_parameters()]
        saved = torch.cat([torch.from_numpy(state["arrays"][n]).flatten() for n in names])
        final = world.ranks[0].final_params()
        if final is None or saved.shape != final.shape or not torch.allclose(saved, final, atol=1e-6):
            return f"{world.label}: the checkpoint's weights are not the final trained weights"
        held = (_final_buffers(world.ranks[0]) or {}).get("values") or {}
        for name in (k for k in want_keys if k.endswith(("running_mean", "running_var"))):
            got = torch.from_numpy(state["arrays"][name]).flatten()
            if name not in held or not torch.allclose(got, torch.tensor(held[name], dtype=torch.float64), atol=1e-6):
                return f"{world.label}: the checkpoint's {name} is not the model's at the end"


def _pytorch_class_on_gpus(runs):
    for world, r in each_rank(runs):
        plain = [n["name"] for n in _norms(r, "ddp") or [] if n.get("type") != "SyncBatchNorm"]
        if plain:
            return (f"{world.label}: on rank {r.rank}, {plain[0]} is not nn.SyncBatchNorm: on GPUs "
                    "use PyTorch's own")


EXERCISE = Exercise(
    id="3.2",
    title="synchronized batch norm in a DDP script",
    kind="script",
    timeout=60.0,
    warm_imports=("torch._dynamo", "ddpcourse.syncbn"),
    expected=lambda seed: {"initial": flat(make_bn_model(0))},
    work=_work,
    checks=[
        runs_to_the_end("the script runs to the end on every rank", 2),
        Check("every batch norm layer is synchronized when DDP wraps the model", 3, _synchronized_when_wrapped,
              hint=Hint(
                  idea="DDP looks at the layers it wraps when it is built, so every batch norm layer must already be "
                       "a synchronized one then; converting afterwards, or only some layers, leaves plain ones inside.",
                  section="The course's stand-in, for CPUs",
                  where="In main, the lines between building the model with make_bn_model and wrapping it in DDP.",
                  how="Replace every batch norm layer by a synchronized one (the course's "
                      "ddpcourse.convert_sync_batchnorm does the whole model, on CPUs and GPUs alike), and only then "
                      "wrap the model in DDP.",
                  lines_of=("ddp",))),
        Check("parameters identical on all ranks after every optimizer step", 1, params_identical_across_ranks,
              hint=Hint(
                  idea="DDP keeps the ranks' parameters identical by averaging the gradients during backward; "
                       "parameters that differ took a step whose gradients DDP never averaged.",
                  section="2:5. Wrapping the model in DDP",
                  where="The training loop: which model computes the output, and what backward runs on.",
                  how="Compute every output with the DDP-wrapped model and call backward on the loss of that output, "
                      "so that each optimizer step uses the averaged gradients.")),
        Check("parameters equal one process trained on the whole global batches", 3, _equals_global_batch,
              hint=Hint(
                  idea="With synchronized batch norm, W ranks of 4 samples take the step of one process on the 4 "
                       "times W samples; with plain batch norm each rank normalizes with its own 4 samples only.",
                  section="2. Synchronized batch norm",
                  where="In main, where the model is built, converted and wrapped; then the training loop, which "
                        "should be the script's as given.",
                  how="Convert every batch norm layer of the model before wrapping it in DDP, and keep the script's "
                      "data, sampler, batch size, optimizer and learning rate as they were.")),
        Check("running statistics on every rank equal one process's on the whole global batches", 2,
              _running_statistics,
              hint=Hint(
                  idea="Synchronized batch norm updates every rank's running statistics from every rank's samples, "
                       "so they agree with one process's; plain batch norm under DDP leaves rank 0's alone.",
                  section="2. Synchronized batch norm",
                  where="In main, the conversion of the model: whether it reaches every batch norm layer, before "
                        "DDP wraps the model.",
                  how="Convert the whole model, not a single layer: the running statistics of every converted "
                      "layer then follow by themselves, with no code of yours.")),
        Check("exactly one checkpoint writer: global rank 0", 1, _one_writer,
              hint=Hint(
                  idea="Every rank holds the same trained model, so one process writes the checkpoint: global rank 0.",
                  section="2:7. Saving a checkpoint: once, from rank 0, without `module.`",
                  where="The end of main: the torch.save call and the test around it.",
                  how="Keep the save under a test that this process is global rank 0, the rank the process group "
                      "gives, not the local rank.",
                  lines_of=("save",))),
        Check("the checkpoint loads strictly into a plain BNNet and holds the trained weights and running statistics",
              2, _checkpoint_loads_and_holds_the_run,
              hint=Hint(
                  idea="The checkpoint is the state dict of the model inside the DDP wrapper, saved after training: "
                       "BNNet's own keys, with the trained weights and running statistics.",
                  section="2:7. Saving a checkpoint: once, from rank 0, without `module.`",
                  where="The torch.save in main: what it saves, and where it sits relative to the training loop.",
                  how="Save, after the last epoch, the state dict of the module DDP wraps rather than the wrapper's "
                      "own, whose keys carry a `module.` prefix.",
                  lines_of=("save",))),
        Check("process group destroyed at the end", 1, _destroyed,
              hint=Hint(
                  idea="Every process leaves the process group when it is done, so that its resources are freed and "
                       "the job ends cleanly.",
                  section="2:8. `destroy_process_group()` at the end",
                  where="The last lines of main, after the checkpoint is saved.",
                  how="Destroy the process group on every rank as the last thing main does, outside any test of the "
                      "rank.",
                  lines_of=("destroy_process_group",))),
        Check("on GPUs, PyTorch's own nn.SyncBatchNorm on nccl", 1, _pytorch_class_on_gpus, gpu_only=True,
              hint=Hint(
                  idea="On GPUs with nccl, PyTorch's own nn.SyncBatchNorm synchronizes batch norm; the course's "
                       "CPU layers are a stand-in for gloo.",
                  section="`nn.SyncBatchNorm`",
                  where="In main, the line that converts the model's batch norm layers, and what it picks on GPUs.",
                  how="Convert with ddpcourse.convert_sync_batchnorm, which hands a GPU model to PyTorch's own "
                      "converter, or call nn.SyncBatchNorm.convert_sync_batchnorm yourself when the ranks are on "
                      "GPUs; do not build CPU stand-in layers there.")),
    ],
)
