"""Exercise 3.4: FSDP2. setup(model, mesh, lr) shards the MLP with fully_shard (each block, then the
root) and returns its Adam; save_full(model, path) writes the full weights from rank 0.

The harness trains a few steps on global batches, keeping the full parameters after each step
(gathered by the harness, so the student's code is judged on what the model holds), and records
how each parameter is stored on each rank. The checkpoint is read back by the grader.
"""

from __future__ import annotations

import torch

from autograder.checks import Check, each_rank, writers_saves
from autograder.exercises import Exercise
from autograder.exercises.ex3_3 import steps_equal_adam
from autograder.hints import Hint
from autograder.reference import flat
from ddpcourse import MLP, make_mlp
from ddpcourse.given.ex3_4 import STEPS

BLOCKS = ("net.0", "net.2", "net.4")


def _work(runs):
    if not any(r.first("sharded") for _, r in each_rank(runs)):
        return "no rank got as far as training: setup never returned"


def _sharded(runs, model=MLP):
    """Every parameter of the `model` class a DTensor, each rank storing at most its 1/W of it."""
    rows_of = {n: p.shape[0] for n, p in model().named_parameters()}
    for world in sorted(runs, key=lambda w: -w.world_size):
        w = world.world_size
        for r in world.ranks:
            params = (r.first("sharded") or {}).get("params", [])
            plain = [p["name"] for p in params if not p.get("dtensor")]
            if plain:
                return (f"world size {w}: on rank {r.rank}, {', '.join(plain[:3])} "
                        f"{'is a plain tensor' if len(plain) == 1 else 'are plain tensors'}, not a sharded DTensor: "
                        "fully_shard was not applied to the module that holds it")
            for p in params:
                rows = rows_of.get(p["name"]) or p["numel"]
                most = -(-rows // w) * (p["numel"] // rows)  # FSDP cuts along the first dimension
                if p["local"] > most:
                    return (f"world size {w}: rank {r.rank} stores {p['local']} of {p['name']}'s {p['numel']} "
                            f"values, more than 1/{w} of them ({p['placements']})")


def _every_block_and_root(runs, blocks=BLOCKS):
    for world, r in each_rank(runs):
        fsdp = set((r.first("sharded") or {}).get("fsdp", []))
        missing = [b for b in blocks if b not in fsdp]
        if missing:
            return (f"{world.label}: on rank {r.rank}, block(s) {', '.join(missing)} have no "
                    "fully_shard of their own: the whole model is gathered at once, so no rank ever holds less "
                    "than all of it in the forward pass")
        if "" not in fsdp:
            return (f"{world.label}: on rank {r.rank}, fully_shard was not called on the root "
                    "model, after its blocks: the root schedules the blocks' gathers and frees")


def _trained_like_adam(runs):
    start = flat(make_mlp(0))
    for world, r in each_rank(runs):
        got = r.kept_all("after step")
        if got and all(torch.equal(g, start) for g in got):
            return (f"{world.label}: the parameters never changed in {STEPS} steps: the "
                    "optimizer holds tensors that are no longer the model's (fully_shard replaces every "
                    "parameter by a DTensor; an optimizer built before it steps the old ones)")
    return steps_equal_adam(runs, "after step", STEPS)  # to float rounding: FSDP sums in another order


def _one_writer(runs):
    for world in runs:
        failed = next((r for r in world.ranks if (r.first("saved") or {}).get("error")), None)
        if failed is not None:
            return f"{world.label}: on rank {failed.rank}, save_full raised {failed.first('saved')['error']}"
        writers = sorted({r.rank for r in world.ranks if r.of("save")})
        if writers != [0]:
            return (f"{world.label}: torch.save was called by rank(s) {writers or 'none'}; "
                    "exactly one writer, rank 0, is expected"
                    + ("; what it saved is empty: a full state dict offloaded to the CPU reaches rank 0 only"
                       if _saved_empty(world) else ""))


def _saved_empty(world) -> bool:
    """Whether the checkpoint writer's last file holds an empty state dict."""
    _, saves = writers_saves(world)
    found = world.exports.get(saves[-1]["path"], {}) if saves else {}
    return found.get("type") == "dict" and not found.get("keys")


def _full_weights_saved(runs):
    names = [n for n, _ in MLP().named_parameters()]
    for world in sorted(runs, key=lambda w: -w.world_size):  # a shard shows best where there are most ranks
        writer, saves = writers_saves(world)
        if not saves:
            return f"{world.label}: rank 0 saved no checkpoint"
        if writer.rank != 0 and _saved_empty(world):
            continue  # a full state dict offloaded to the CPU reaches rank 0 only: the writer check names that
        found = world.exports.get(saves[-1]["path"], {})
        sharded = [k for k, v in found.get("values", {}).items() if isinstance(v, dict) and "DTensor" in v]
        if sharded or "DTensor" in str(found.get("error", "")):
            return (f"{world.label}: the checkpoint holds DTensors, a sharded state dict: each is "
                    f"rank 0's 1/{world.world_size} of a parameter, the other ranks' shards are not in it. Gather "
                    "the full state dict on every rank, then save it on rank 0")
        if found.get("type") != "dict":
            return (f"{world.label}: the checkpoint is not a state dict readable with "
                    f"torch.load(weights_only=True) ({found.get('error') or found.get('type')})")
        arrays = found["arrays"]
        wrong = [n for n, p in MLP().named_parameters() if n not in arrays or tuple(arrays[n].shape) != tuple(p.shape)]
        if wrong or sorted(found["keys"]) != sorted(names):
            return (f"{world.label}: the checkpoint does not load into a plain MLP: keys "
                    f"{found['keys'][:4]}" + (f", {wrong[0]} missing or of another shape" if wrong else ""))
        saved = torch.cat([torch.from_numpy(arrays[n]).flatten() for n in names])
        trained = world.ranks[0].kept_all("after step")
        if not trained or not torch.allclose(saved, trained[-1], atol=1e-6):
            return f"{world.label}: the checkpoint's weights are not the model's after training"


EXERCISE = Exercise(
    id="3.4",
    title="FSDP2: shard, train, save the full weights",
    kind="function",
    entry="setup",
    params=lambda seed: {"seed": seed},
    work=_work,
    warm_imports=("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint.state_dict"),
    timeout=40.0,
    checks=[
        Check("parameters are DTensors sharded over the ranks: each rank stores about 1/W of each", 2, _sharded,
              hint=Hint(
                  idea="fully_shard turns every parameter of the modules it is given into a DTensor cut along its "
                       "first dimension, each rank storing its own rows; a parameter no fully_shard reaches stays a "
                       "plain, whole tensor on every rank.",
                  section="5. FSDP: `fully_shard`",
                  where="setup: the fully_shard calls, which modules they are given, and the mesh.",
                  how="Shard each block of model.net and then the model itself, in place, on the mesh you were "
                      "given, so that every parameter belongs to some sharded module.")),
        Check("fully_shard on every block, then on the root", 1, _every_block_and_root,
              hint=Hint(
                  idea="Each fully_shard call makes one group, gathered in one piece: one group per block keeps a "
                       "single block gathered at a time, and the root's call groups what is left and drives the "
                       "blocks' gathers and frees.",
                  section="5. FSDP: `fully_shard`",
                  where="setup: which modules you call fully_shard on, and in which order.",
                  how="Call fully_shard once on each of the three Linear blocks of model.net, then once on the root "
                      "model, after its blocks.")),
        Check("every step equals plain Adam on one process over the global batch (to float rounding)", 3,
              _trained_like_adam,
              hint=Hint(
                  idea="fully_shard replaces every parameter by a new DTensor, so the optimizer must be built from the "
                       "parameters the model holds after sharding; training is then plain Adam's.",
                  section="5. FSDP: `fully_shard`",
                  where="setup: where you build the Adam optimizer relative to the fully_shard calls, and its "
                        "learning rate.",
                  how="Build Adam after all the fully_shard calls, from the model's parameters as they are then, "
                      "with the learning rate you were given.")),
        Check("exactly one checkpoint writer: rank 0", 1, _one_writer,
              hint=Hint(
                  idea="Every rank takes part in gathering the full weights, but only one process writes the file: "
                       "rank 0.",
                  section="5. FSDP: `fully_shard`",
                  where="save_full: the torch.save call and the test of the rank around it.",
                  how="Leave the gathering on every rank and put only the save under a test that this is rank 0.",
                  lines_of=("save",))),
        Check("the checkpoint holds the full trained weights and loads into a plain MLP", 3, _full_weights_saved,
              hint=Hint(
                  idea="A sharded model's own state dict holds DTensors, each rank's rows only; the file must hold "
                       "the full weights as plain tensors, gathered from every rank, with a plain MLP's keys.",
                  section="5. FSDP: `fully_shard`",
                  where="save_full: what you hand torch.save, and how and on which ranks it was gathered.",
                  how="On every rank, gather the full state dict (a collective: the state-dict helpers do it with "
                      "the option for full tensors, or gather each DTensor yourself), then have rank 0 save those "
                      "plain tensors.",
                  lines_of=("save",))),
    ],
)
