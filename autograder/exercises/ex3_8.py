"""Exercise 3.8: a model too large for one rank. build(mesh, path, reshard_after_forward) builds the Tower without
ever holding all of it, shards it block by block, and loads the full checkpoint, which only rank 0 can read;
predict(reshard_after_forward) says what one training step gathers, and whether it fits the device.

The harness measures what build allocates as it runs (the peak of the live tensors PyTorch's operations made, as
a GPU's allocator would report it; the checkpoint read from disk is host memory and not counted), keeps the full
weights the model holds after build and after each training step, and counts, in one step under each setting,
the all-gathers made and the parameter bytes held as each block runs.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from autograder.checks import Check, each_rank
from autograder.exercises import Exercise
from autograder.exercises.ex3_3 import TOL  # FSDP sums the ranks' gradients in another order than one process
from autograder.exercises.ex3_4 import _every_block_and_root, _sharded
from autograder.exercises.ex3_7 import ALL_GATHERS
from autograder.hints import Hint
from autograder.reference import flat, parameter_blocks
from ddpcourse.given.ex3_8 import CAPACITY, DEPTH, LR, Tower, batches, tower

BLOCKS = tuple(f"blocks.{i}" for i in range(DEPTH))
PREDICTED_AT = 2  # the world size the predictions are about


def _model_bytes() -> int:
    return sum(p.numel() * p.element_size() for p in Tower().parameters())


def _work(runs):
    if not any(r.first("built") for _, r in each_rank(runs)):
        return "no rank got as far as training: build never returned"


def _a_sharded_tower(runs):
    for world, r in each_rank(runs):
        built = r.first("built") or {}
        if not built.get("tower"):
            return f"{world.label}: on rank {r.rank}, build returned a {built.get('type')}, not the Tower"
    return _sharded(runs, Tower) or _every_block_and_root(runs, BLOCKS)


def _within_the_device(runs):
    whole = _model_bytes()
    for world, r in each_rank(runs):
        for label, setting in (("built", ""), ("built without resharding", " (reshard_after_forward=False)")):
            event = r.first(label)
            if event is None:
                continue
            if not event.get("measured"):
                return (f"{world.label}: on rank {r.rank}, build{setting} turned off the measurement of what it "
                        "allocated, so whether it fits cannot be seen")
            if event["peak"] > CAPACITY:
                whole_model = " (the whole model, or more)" if event["peak"] >= whole else ""
                return (f"{world.label}: on rank {r.rank}, build{setting} held {event['peak']:,} bytes at once"
                        f"{whole_model}, more than the device's {CAPACITY:,}; it went past them at {event['where']}. "
                        f"The Tower is {whole:,} bytes: no rank may build it whole, nor allocate it before it is "
                        "sharded, nor receive all of its weights at once")


def _holds_the_checkpoint(runs):
    want = flat(tower(runs.params["seed"]))
    for world, r in each_rank(runs):
        got = r.kept("loaded")
        if got is None:
            continue  # build did not return a model: charged by the check of what it returned
        if got.shape != want.shape:
            return f"{world.label}: rank {r.rank}'s model holds {got.numel()} parameters, the checkpoint {want.numel()}"
        if not torch.equal(got, want):
            wrong = [name for name, part in parameter_blocks(Tower()) if not torch.equal(got[part], want[part])]
            return (f"{world.label}: after build, the model's weights differ from the checkpoint's by up to "
                    f"{(got - want).abs().max().item():.3g}, in {len(wrong)} of {len(parameter_blocks(Tower()))} "
                    f"tensors ({', '.join(wrong[:3])}{', ...' if len(wrong) > 3 else ''})"
                    + _which_shards_are_wrong(world, got, want))


def _which_shards_are_wrong(world, got: torch.Tensor, want: torch.Tensor) -> str:
    """Whose shards differ (FSDP gives rank k the k-th block of rows of each tensor): the rank that read the file,
    or the ones that had to receive the weights from it."""
    w, wrong_ranks, at = world.world_size, set(), 0
    for p in Tower().parameters():
        rows, per_row = p.shape[0], p.numel() // p.shape[0]
        chunk = -(-rows // w)
        for k in range(w):
            part = slice(at + min(k * chunk, rows) * per_row, at + min((k + 1) * chunk, rows) * per_row)
            if not torch.equal(got[part], want[part]):
                wrong_ranks.add(k)
        at += p.numel()
    if wrong_ranks and 0 not in wrong_ranks:
        return (f": rank 0's shards are right, those of rank(s) {sorted(wrong_ranks)} are not. Only rank 0 can "
                "read the file; the others must receive the weights from it")
    return ": the shards were never given the checkpoint's values (to_empty leaves them uninitialized)" \
        if wrong_ranks == set(range(w)) else ""


def _trains_like_one_process(runs):
    checkpoint = flat(tower(runs.params["seed"]))
    for world, r in each_rank(runs):
        start, got = r.kept("loaded"), r.kept_all("after step")
        if start is None or not torch.equal(start, checkpoint):
            # no model, or other weights: charged by the checks of build (and from weights of no one's choosing,
            # dead units can make Adam's steps differ by more than rounding)
            continue
        want = _adam_from_checkpoint(runs.params["seed"])
        if len(got) != len(want):
            return f"{world.label}: rank {r.rank} recorded {len(got)} training steps of the {len(want)} the harness took"
        for k, (a, b) in enumerate(zip(got, want)):
            if not torch.allclose(a, b, **TOL):
                return (f"{world.label}: after training step {k + 1}, rank {r.rank}'s weights differ from plain "
                        f"Adam(lr={LR}) on one process, started from the checkpoint's weights, by up to "
                        f"{(a - b).abs().max().item():.3g}: the model build returned does not train as the Tower "
                        "does (in float32, over the whole global batch)")


@functools.cache
def _adam_from_checkpoint(seed: int) -> tuple:
    """The weights after each step of plain Adam on one process, over the global batch, from the checkpoint's."""
    model = tower(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    after = []
    for x, y in batches(seed, 1, 0):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        after.append(flat(model))
    return tuple(after)


def _step_counts(r) -> dict[bool, dict]:
    """{reshard_after_forward: {"gathers": all-gathers in the step, "held": most parameter bytes held}}, from the
    first step recorded under each setting."""
    found, opened = {}, None
    for k, e in enumerate(r.events):
        if e.get("kind") != "phase" or e.get("step") != 0:
            continue
        setting = e.get("reshard_after_forward")
        if e.get("phase") == "start":
            opened = k
        elif opened is not None and setting not in found:
            ops = [x.get("op") for x in r.events[opened:k] if x.get("kind") == "collective"]
            found[setting] = {"gathers": sum(op in ALL_GATHERS for op in ops), "held": e.get("held"),
                              "kept": e.get("gathered_after_forward") or [], "blocks": e.get("blocks") or 0}
    return found


def _reshard_setting_reaches_the_blocks(runs):
    if _a_sharded_tower(runs) is not None:
        return None  # a model not sharded block by block: charged by that check
    for world, r in each_rank(runs):
        counts = _step_counts(r)
        if True not in counts or False not in counts:
            continue  # the second build or its step never ran: told as a crash
        blocks = range(counts[False]["blocks"])
        freed = [k for k in blocks if k not in counts[False]["kept"]]
        if freed:
            return (f"{world.label}: on rank {r.rank}, built with reshard_after_forward=False, block(s) "
                    f"{_ranges(freed)} were freed after their forward pass and gathered again for backward "
                    f"({counts[False]['gathers']} all-gathers in the step): the setting did not reach their fully_shard")
        if counts[True]["kept"]:
            return (f"{world.label}: on rank {r.rank}, built with reshard_after_forward=True, block(s) "
                    f"{_ranges(counts[True]['kept'])} stayed gathered after the forward pass: each block's full "
                    "parameters must be freed once its forward pass is done")
        n = counts[True]["blocks"]
        if counts[False]["gathers"] == 1 + n and counts[True]["gathers"] == 2 + 2 * n:
            return (f"{world.label}: on rank {r.rank}, built with reshard_after_forward=True, the step made "
                    f"{2 + 2 * n} all-gathers, not {1 + 2 * n}: the root's own parameters were freed after the "
                    "forward pass and gathered again for backward, so the setting reached the root's fully_shard "
                    "too. The root keeps its default: backward needs its parameters at once")


def _ranges(numbers: list[int]) -> str:
    return f"{numbers[0]}-{numbers[-1]}" if len(numbers) > 2 and numbers == list(range(numbers[0], numbers[-1] + 1)) \
        else ", ".join(map(str, numbers))


def _course_measures() -> dict:
    """What the Tower, sharded as asked, gathers and holds in one step at PREDICTED_AT ranks, from its shapes."""
    w = PREDICTED_AT
    shard = sum(-(-p.shape[0] // w) * (p.numel() // p.shape[0]) * 4 for p in Tower().parameters())
    root = sum(p.numel() * 4 for n, p in Tower().named_parameters() if not n.startswith("blocks."))
    block = sum(p.numel() * 4 for p in Tower().blocks[0].parameters())
    return {"gathers": {True: 1 + 2 * DEPTH, False: 1 + DEPTH},
            "fits": {True: shard + root + block <= CAPACITY, False: shard + _model_bytes() <= CAPACITY}}


def _predictions_match(runs):
    event = next((r.first("prediction") for w in runs for r in w.ranks if r.first("prediction")), None) or {}
    want, wrong = _course_measures(), []
    for setting in (True, False):
        said = event.get(str(setting)) or {}
        if said.get("error"):
            return f"predict({setting}): {said['error']}"
        got = said.get("value")
        if not (isinstance(got, list) and len(got) == 2):
            return f"predict({setting}) returned {got!r}, not (all-gathers, fits)"
        gathers, fits = got
        if gathers != want["gathers"][setting]:
            wrong.append(f"predict({setting}) says {gathers!r} all-gathers in one step, a Tower sharded block by block "
                         f"makes {want['gathers'][setting]}")
        if not isinstance(fits, bool):
            wrong.append(f"predict({setting}) says it fits: {fits!r}; say True or False")
        elif fits is not want["fits"][setting]:
            wrong.append(f"predict({setting}) says it fits: {fits!r}; it does {'' if want['fits'][setting] else 'not '}"
                         "fit")
    if wrong:
        return f"at world size {PREDICTED_AT}: " + "; ".join(wrong) + _as_measured(runs)


def _as_measured(runs) -> str:
    world = next((w for w in runs if w.world_size == PREDICTED_AT), None)
    counts = _step_counts(world.ranks[0]) if world else {}
    seen = [f"reshard_after_forward={s}: {c['gathers']} all-gathers, at most {c['held']:,} bytes of parameters held"
            for s, c in counts.items() if isinstance(c.get("held"), int)]
    return f". Your run, rank 0: {'; '.join(seen)} (the device holds {CAPACITY:,})" if seen else ""


EXERCISE = Exercise(
    id="3.8",
    title="FSDP2 for a model too large for one rank",
    kind="function",
    entry="build",
    params=lambda seed: {"seed": seed},
    work=_work,
    world_sizes=(2, 3),  # one rank cannot hold the Tower
    warm_imports=("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint.state_dict"),
    timeout=40.0,
    timeline_between=("building", "done"),  # not the checkpoint the harness writes first
    checks=[
        Check("build returns the Tower, fully_shard on every block and then the root, each rank storing about 1/W", 2,
              _a_sharded_tower,
              hint=Hint(
                  idea="build returns the Tower itself, sharded group by group: fully_shard on each of its blocks, "
                       "then on the root, which keeps the embedding and the head, each rank storing its own rows of "
                       "every parameter.",
                  section="5. FSDP: `fully_shard`",
                  where="build: the fully_shard calls, which modules they are given, and what build returns.",
                  how="Call fully_shard on every block in the Tower's blocks, then on the Tower, all on the mesh you "
                      "were given, and return that Tower, not a copy or another module.")),
        Check(f"no rank ever holds more than the device's {CAPACITY:,} bytes while building and loading", 4,
              _within_the_device,
              hint=Hint(
                  idea="The whole Tower does not fit on a rank's device: no rank may build it whole, allocate it "
                       "before it is sharded, or receive all of its weights at once; only its own shards, and a "
                       "tensor at a time while loading.",
                  section="FSDP's settings",
                  where="The start of build: where the Tower is created and on which device, when its memory is "
                        "allocated relative to the fully_shard calls, and how the weights travel from rank 0.",
                  how="Create the Tower on the meta device, which holds shapes and no memory, shard it, and only then "
                      "allocate the shards on the mesh's device type; move the weights one tensor at a time, never "
                      "the whole model in one message.")),
        Check("after build, every rank's shards hold exactly the checkpoint's weights", 3, _holds_the_checkpoint,
              hint=Hint(
                  idea="After build every rank's shards hold the checkpoint's values. Only rank 0 can read the file, "
                       "so the other ranks receive their rows from it; memory allocated for the shards starts out "
                       "uninitialized.",
                  section="FSDP's settings",
                  where="build, after the shards are allocated: how rank 0's weights reach every rank's shards.",
                  how="Have rank 0 read the file and the other ranks bring nothing, then send each full tensor from "
                      "rank 0 while every rank keeps its own rows: the state-dict helpers do it with the option that "
                      "broadcasts from rank 0, or scatter each tensor yourself.",
                  lines_of=("load",))),
        Check("training the built model equals plain Adam on one process, from the checkpoint's weights", 2,
              _trains_like_one_process,
              hint=Hint(
                  idea="The built Tower trains exactly as the Tower does on one process: in float32, over the whole "
                       "global batch, the model build returns being the one trained.",
                  section="FSDP's settings",
                  where="build: any mixed-precision policy or change of dtype, and the model it returns.",
                  how="Shard with fully_shard's default precision, so that the parameters, the computation and the "
                      "gradients stay float32, and return the sharded Tower itself.")),
        Check("reshard_after_forward reaches every block and not the root: with False each block stays gathered from forward to backward", 2,
              _reshard_setting_reaches_the_blocks,
              hint=Hint(
                  idea="reshard_after_forward belongs to each group: a block sharded with True is freed after its "
                       "forward pass and gathered again for backward; with False it stays gathered until backward.",
                  section="FSDP's settings",
                  where="build: the fully_shard calls of the blocks, and whether they receive build's "
                        "reshard_after_forward.",
                  how="Pass build's reshard_after_forward on to every block's fully_shard, and leave the root at its "
                      "default.")),
        Check(f"predict says what one step gathers, and whether it fits, at world size {PREDICTED_AT}", 2,
              _predictions_match,
              hint=Hint(
                  idea="Each group is all-gathered before its forward pass, and again before its backward pass unless "
                       "it stayed gathered; during forward a rank holds its shards plus every parameter gathered at "
                       "that moment.",
                  section="FSDP's settings",
                  where="predict: your count of the Tower's groups (the root holds parameters of its own) and of "
                        "their gathers, and your sum of bytes at the fullest moment of the forward pass.",
                  how="Count the gathers of each group in one step under each setting. For the fit, add a rank's "
                      "shards at 2 ranks (rows rounded up) to the full parameters held at the worst moment of "
                      "forward, then compare with CAPACITY.")),
    ],
)
