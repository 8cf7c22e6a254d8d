"""Exercise 3.3: ZeRO stage 1 with ZeroRedundancyOptimizer, and a checkpoint of its sharded state:
make_optimizer(model, lr) and save_checkpoint(model, optimizer, path).

The harness trains a DDP-wrapped MLP a few steps with the student's optimizer, measures which
parameters' Adam state each rank holds, calls save_checkpoint on every rank, then takes one more
step. The grader loads what rank 0 saved into Adam on one process and takes that next step itself:
a checkpoint is right when it continues the run, whatever the run was (a run that trained
wrongly is charged by the training check alone).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from autograder.checks import Check, each_rank, writers_saves
from autograder.exercises import Exercise
from autograder.hints import Hint
from autograder.reference import flat, parameter_blocks
from ddpcourse import MLP, make_mlp
from ddpcourse.given.ex3_3 import LR, STEPS, data, rows
from ddpcourse.optim import Adam

TOL = dict(rtol=1e-4, atol=1e-5)
MOMENTS = ("exp_avg", "exp_avg_sq")


def _sizes() -> list[int]:
    return [p.numel() for p in MLP().parameters()]


@functools.lru_cache(maxsize=8)
def trajectory(seed: int, world_size: int) -> tuple[torch.Tensor, ...]:
    """Plain Adam on one process over the global batches: the parameters after each step."""
    return tuple(adam_steps(*data(seed), range(STEPS + 1), world_size))


def adam_steps(x, y, steps, world_size: int, model=None, adam=None) -> list[torch.Tensor]:
    """The parameters after each of ``steps`` (global step numbers) of plain Adam on one process,
    from make_mlp(0) and a fresh Adam unless given: the ranks' losses averaged, as DDP or FSDP
    average their gradients."""
    model = model if model is not None else make_mlp(0).double()
    adam = adam if adam is not None else Adam(model.parameters(), lr=LR)
    after = []
    for k in steps:
        adam.zero_grad()
        loss = sum(F.cross_entropy(model(x[rows(k, r, world_size)].double()), y[rows(k, r, world_size)])
                   for r in range(world_size)) / world_size
        loss.backward()
        adam.step()
        after.append(flat(model))
    return after


def _work(runs):
    if not any(r.first("optimizer_state") for _, r in each_rank(runs)):
        return "no rank got as far as training: make_optimizer never returned an optimizer that steps"


def _sharded(runs):
    total = len(_sizes())
    for world in sorted(runs, key=lambda w: -w.world_size):
        held = {r.rank: (r.first("optimizer_state") or {}).get("held", {}) for r in world.ranks}
        kind = next((r.first("optimizer_state") or {}).get("optimizer") for r in world.ranks)
        owners = {i: [rank for rank, h in held.items() if str(i) in h] for i in range(total)}
        if world.world_size > 1 and all(len(o) == world.world_size for o in owners.values()):
            size = sum(held[0].values())
            return (f"{world.label}: every rank holds optimizer state for all {total} parameters "
                    f"({size} bytes each), as a plain {kind} does: the state is not sharded")
        nowhere = [i for i, o in owners.items() if not o]
        if nowhere:
            return (f"{world.label}: no rank holds optimizer state for parameter(s) {nowhere[:4]} "
                    "after training: the optimizer keeps no Adam moments for them")
        shared = {i: o for i, o in owners.items() if len(o) > 1}
        if shared:
            i, o = next(iter(shared.items()))
            return f"{world.label}: parameter {i}'s state is held by ranks {o}, not by one rank"


def steps_equal_adam(runs, label: str, steps: int) -> str | None:
    """Every rank's parameters after each step (kept under `label`) equal plain Adam's on one process."""
    seed = runs.params["seed"]
    for world in runs:
        want = trajectory(seed, world.world_size)[:steps]
        for r in world.ranks:
            got = r.kept_all(label)
            if len(got) != len(want):
                return (f"{world.label}: rank {r.rank} took {len(got)} optimizer steps, "
                        f"the harness asked for {len(want)}")
            for k, (a, b) in enumerate(zip(got, want)):
                if not torch.allclose(a, b, **TOL):
                    where = max(parameter_blocks(MLP()), key=lambda nb: (a[nb[1]] - b[nb[1]]).abs().max())[0]
                    return (f"{world.label}: after step {k + 1}, rank {r.rank}'s parameters differ "
                            f"from plain Adam(lr={LR}) on one process by up to {(a - b).abs().max().item():.3g} "
                            f"(largest in {where})")


def _consolidated_then_one_writer(runs):
    for world in runs:
        sharded = any((r.first("optimizer_state") or {}).get("optimizer") == "ZeroRedundancyOptimizer"
                      for r in world.ranks)
        for r in world.ranks:
            event = r.first("saved") or {}
            if event.get("error"):
                return (f"{world.label}: on rank {r.rank}, save_checkpoint raised {event['error']}"
                        + (_why_not_consolidated(r) if sharded and "consolidate" in event["error"] else ""))
        writers = sorted({r.rank for r in world.ranks if r.of("save")})
        if writers != [0]:
            return (f"{world.label}: torch.save was called by rank(s) {writers or 'none'}; "
                    "exactly one writer, rank 0, is expected")
        missing = [r.rank for r in world.ranks if sharded and not _consolidated_before_save(r, world)]
        if missing:
            return (f"{world.label}: rank(s) {missing} did not call consolidate_state_dict before "
                    "rank 0 saved: every rank sends its shard to rank 0")


def _why_not_consolidated(r) -> str:
    calls = [e for e in r.of("enter") if e.get("call") == "consolidate_state_dict"]
    if not calls:
        return ("\nZeroRedundancyOptimizer.state_dict() returns the whole state only on the rank it was "
                "consolidated to: call consolidate_state_dict(to=0) on every rank first")
    return (f"\nthe state was consolidated to rank {calls[-1].get('root')}, and only that rank holds it: "
            "only rank 0 saves")


def _consolidated_before_save(r, world) -> bool:
    calls = [e for e in r.of("enter") if e.get("call") == "consolidate_state_dict"]
    save = world.ranks[0].first("save")
    return bool(calls) and (save is None or calls[0]["t"] <= save["t"])


def _saved(world) -> tuple[dict | None, str | None]:
    """What the writer saved (checks.writers_saves), read back by the grader: ({name: tensor}, values) or a problem."""
    _, saves = writers_saves(world)
    if not saves:
        event = world.ranks[0].first("saved")
        why = (f" (save_checkpoint raised {event['error'].split(':')[0]}: see the check on consolidating)"
               if event and event.get("error") else "")
        return None, f"{world.label}: rank 0 saved no checkpoint{why}"
    found = world.exports.get(saves[-1]["path"], {})
    if found.get("type") != "dict":
        return None, (f"{world.label}: the checkpoint is not a dict readable with "
                      f"torch.load(weights_only=True) ({found.get('error') or found.get('type')})")
    if sorted(found["keys"]) != ["model", "optimizer"]:
        return None, f"the checkpoint's keys are {found['keys'][:4]}, not 'model' and 'optimizer'"
    return found, None


def _model_saved(runs):
    want = [name for name, _ in MLP().named_parameters()]
    for world in runs:
        found, problem = _saved(world)
        if problem:
            return problem
        keys = [k.removeprefix("model.") for k in found["tensors"] if k.startswith("model.")]
        if sorted(keys) != sorted(want):
            prefixed = next((k for k in keys if k.startswith("module.")), None)
            return (f"the checkpoint's model keys start with 'module.' ({prefixed}): the DDP wrapper was saved"
                    if prefixed else f"the checkpoint's model does not load into a plain MLP (keys {keys[:3]})")
        saved = torch.cat([torch.from_numpy(found["arrays"][f"model.{n}"]).flatten() for n in want])
        trained = world.ranks[0].kept_all("optimizer step")
        if len(trained) < 2 or not torch.allclose(saved, trained[-2], atol=1e-6):
            return f"{world.label}: the checkpoint's model is not the model as trained when it was saved"


def _optimizer_continues(runs):
    seed = runs.params["seed"]
    x, y = data(seed)
    sizes = _sizes()
    for world in runs:
        found, problem = _saved(world)
        if problem:
            return problem
        arrays, values = found["arrays"], found.get("values", {})
        have = [i for i in range(len(sizes)) if all(f"optimizer.state.{i}.{m}" in arrays for m in MOMENTS)]
        if not have:
            return (f"{world.label}: the saved optimizer state holds no Adam moments, under "
                    "optimizer.state.<index>.exp_avg and exp_avg_sq: save optimizer.state_dict() on rank 0, "
                    "after consolidating")
        if len(have) < len(sizes):
            return (f"{world.label}: the saved optimizer state holds Adam's moments for "
                    f"{len(have)} of the {len(sizes)} parameters ({have[:6]}): one rank's shard, not the whole "
                    "state (consolidate_state_dict(to=0), then optimizer.state_dict() on rank 0)")
        model = make_mlp(0).double()
        weights = {k.removeprefix("model.").removeprefix("module."): v for k, v in arrays.items() if k.startswith("model.")}
        if any(weights.get(n) is None or weights[n].shape != p.shape for n, p in model.named_parameters()):
            return "the checkpoint's model cannot be read as a plain MLP's weights (see the model's check)"
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(torch.from_numpy(weights[n]))
        for i, p in enumerate(model.parameters()):
            shape = arrays[f"optimizer.state.{i}.exp_avg"].shape
            if shape != tuple(p.shape):
                return (f"{world.label}: the saved optimizer state {i} has shape {list(shape)}, "
                        f"parameter {i} of the model {list(p.shape)}: the state is numbered as one rank's shard, "
                        "not as the model's parameters (save the consolidated optimizer.state_dict())")
        adam = Adam(model.parameters(), lr=values.get("optimizer.param_groups.0.lr", LR))
        for i, state in enumerate(adam.state):
            step = arrays.get(f"optimizer.state.{i}.step")
            state["step"] = int(step.item()) if step is not None else int(values.get(f"optimizer.state.{i}.step", 0))
            for m in MOMENTS:
                state[m] = torch.from_numpy(arrays[f"optimizer.state.{i}.{m}"]).view_as(state[m]).clone()
        loss = sum(F.cross_entropy(model(x[rows(STEPS, r, world.world_size)].double()),
                                   y[rows(STEPS, r, world.world_size)]) for r in range(world.world_size))
        (loss / world.world_size).backward()
        adam.step()
        run = world.ranks[0].kept_all("optimizer step")[-1]
        if not torch.allclose(flat(model), run, **TOL):
            return (f"{world.label}: Adam on one process, loaded from the checkpoint, takes another "
                    f"next step than the run (up to {(flat(model) - run).abs().max().item():.3g} apart)")


EXERCISE = Exercise(
    id="3.3",
    title="ZeRO stage 1 and its checkpoint",
    kind="function", on_cpu=True,
    entry="make_optimizer",
    params=lambda seed: {"seed": seed},
    work=_work,
    warm_imports=("torch._dynamo", "torch.distributed.optim"),
    checks=[
        Check("Adam's state is sharded: each parameter's moments on exactly one rank", 3, _sharded,
              hint=Hint(
                  idea="ZeRO stage 1 gives each rank Adam's state for a share of the parameters only: every "
                       "parameter's moments live on exactly one rank, where a plain Adam keeps all of them everywhere.",
                  section="4. ZeRO stage 1: `ZeroRedundancyOptimizer`",
                  where="make_optimizer: the optimizer you build and return, and the parameters you give it.",
                  how="Return PyTorch's stage 1 wrapper, ZeroRedundancyOptimizer, over all the model's parameters, "
                      "with Adam as the optimizer class it builds on each rank for that rank's share.")),
        Check("every step equals plain Adam on one process over the global batch", 3,
              lambda runs: steps_equal_adam(runs, "optimizer step", STEPS + 1),
              hint=Hint(
                  idea="Sharding the state changes where Adam's moments live, not the update: every step is plain "
                       "Adam's on the gradient averaged over the global batch.",
                  section="4. ZeRO stage 1: `ZeroRedundancyOptimizer`",
                  where="make_optimizer: the optimizer class you wrap and the arguments you pass on to it.",
                  how="Wrap Adam itself and hand it the learning rate you were given, leaving its other settings at "
                      "their defaults; DDP already averages the gradients.")),
        Check("consolidate_state_dict on every rank, then rank 0 alone saves", 2, _consolidated_then_one_writer,
              hint=Hint(
                  idea="No rank holds the whole optimizer state: gathering it on rank 0 is a collective that every "
                       "rank takes part in, and only then can rank 0, and rank 0 alone, save it.",
                  section="Saving the optimizer state",
                  where="save_checkpoint: the call that gathers the optimizer state, which rank it gathers to, and "
                        "the test of the rank around it and around torch.save.",
                  how="Consolidate the state to rank 0 on every rank, outside any test of the rank; then put only "
                      "the building of the dict and the save under a test that this is rank 0.",
                  lines_of=("collective", "save"))),
        Check("the checkpoint's model is the trained model and loads into a plain MLP", 1, _model_saved,
              hint=Hint(
                  idea="The checkpoint's model is the state dict of the MLP inside the DDP wrapper, as trained when "
                       "save_checkpoint is called: a plain MLP's keys, with no `module.` prefix.",
                  section="Saving the optimizer state",
                  where="save_checkpoint: what you put under the model's key of the dict you save.",
                  how="Save the state dict of the module DDP wraps, not the wrapper's own, taken when "
                      "save_checkpoint runs.",
                  lines_of=("save",))),
        Check("the checkpoint's optimizer state loads into a plain Adam and continues the run exactly", 3,
              _optimizer_continues,
              hint=Hint(
                  idea="The saved optimizer state must be Adam's whole state, numbered as the model's parameters, "
                       "so that a plain Adam on one process loads it and takes the run's next step.",
                  section="Saving the optimizer state",
                  where="save_checkpoint: what you put under the optimizer's key, and whether it was consolidated "
                        "before you took it.",
                  how="After consolidating on every rank, save on rank 0 the state dict of the ZeRO optimizer "
                      "itself, not that of the local Adam it holds, which covers rank 0's share only.",
                  lines_of=("save",))),
    ],
)
