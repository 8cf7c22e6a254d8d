"""Exercise 3.5: a sharded checkpoint with torch.distributed.checkpoint (DCP), resumed at another world
size: save(model, optimizer, directory) and load(model, optimizer, directory).

The launches of one grading form a chain, in the order of CHAIN_SIZES: the job of 2 processes
trains and saves, the job of 3 loads that checkpoint (resharding it from 2 shards to 3), trains on
and saves, and the job of 1 loads that (3 shards to 1) and trains on. Each job shards the MLP with
FSDP2 itself; the student's code saves and loads. Chained, the jobs must train as one
uninterrupted run. The grader lists the checkpoint
directories (names and sizes only: DCP's index is a pickle, never read here).
"""

from __future__ import annotations

import functools

import torch

from autograder.checks import Check, each_rank
from autograder.exercises import Exercise
from autograder.exercises.ex3_3 import adam_steps
from autograder.hints import Hint
from autograder.reference import flat
from ddpcourse import make_mlp
from ddpcourse.given.ex3_3 import LR
from ddpcourse.given.ex3_5 import CHAIN, CHAIN_SIZES, STEPS_PER_JOB, data, saved_by
from ddpcourse.optim import Adam

TOL = dict(rtol=1e-4, atol=1e-5)  # another world size sums in another order: float rounding


def _work(runs):
    if not any(e.get("call") == "dcp.save" for _, r in each_rank(runs) for e in r.of("enter")):
        return "no rank called torch.distributed.checkpoint's save (dcp.save)"


def _every_rank_saves_and_loads(runs):
    """Whether each rank called DCP in save and in load; an error raised there is told by the check of what it
    broke (the checkpoint, or the resume)."""
    for world in runs:
        for r in world.ranks:
            for kind, call in (("saved", "dcp.save"), ("loaded", "dcp.load")):
                event = r.first(kind)
                if event is None:
                    continue  # the first job has nothing to load
                calls = [e for e in r.of("enter") if e.get("call") in (call, "dcp.async_save")]
                if not calls:
                    return (f"{world.label}: rank {r.rank} never called {call}: every rank writes "
                            "and reads its own shards of a distributed checkpoint")


def listing(world, *names: str) -> dict[str, int] | None:
    """Names and sizes of the plain files in the grading's directory ``names``, links not followed; None if
    it is not a directory."""
    folder = world.grading
    for name in names:
        folder = folder.sub(name) if folder is not None else None
    return folder.listing() if folder is not None else None


def _holds_shards(runs):
    for world in runs:
        w = world.world_size
        files = listing(world, CHAIN, saved_by(w))
        if files is None:
            return f"world size {w}: nothing was saved in the directory save was given"
        shards = {name: size for name, size in files.items() if name.endswith(".distcp")}
        failed = next((r for r in world.ranks if (r.first("saved") or {}).get("error")), None)
        if failed is not None:
            return f"world size {w}: on rank {failed.rank}, save raised {failed.first('saved')['error']}"
        if shards and ".metadata" not in files and _called(world, "dcp.async_save"):
            return (f"world size {w}: the shard files are there but not the .metadata index, which DCP writes "
                    "last, once a save is complete: the job ended before its async_save had finished (wait for "
                    "the future it returns before the job ends)")
        if not files:
            return (f"world size {w}: no file was saved in the directory save was given: DCP writes the "
                    "checkpoint's files into the directory its checkpoint_id names, and load reads them there")
        if ".metadata" not in files or not shards:
            return (f"world size {w}: the directory holds {sorted(files)[:4]}, not a distributed checkpoint "
                    "(its .metadata index and .distcp shard files): save with torch.distributed.checkpoint")
        if len(shards) != w:
            return f"world size {w}: the checkpoint has {len(shards)} shard file(s), not one per rank"
        whole = _a_whole_state_saved(world)
        if whole:
            return whole
        total, largest = sum(shards.values()), max(shards.values())
        if w > 1 and largest > total * (1 / w + 0.25):
            name = max(shards, key=shards.get)
            return (f"world size {w}: {name} holds {100 * largest / total:.0f}% of the checkpoint's data: one "
                    "rank's copy of the whole state, not each rank's shards (a full state dict, gathered, was "
                    "saved; save the sharded one)")


def _called(world, call: str) -> bool:
    return any(e.get("call") == call for r in world.ranks for e in r.of("enter"))


def _a_whole_state_saved(world) -> str | None:
    """A rank that handed dcp.save the whole state as its own: a full state dict, gathered (DCP then spreads the
    copies' writing over the ranks' files, so the files alone can look even)."""
    w = world.world_size
    for r in world.ranks:
        for e in r.of("collective"):
            held, of = e.get("held"), e.get("numbers")
            if e.get("op") in ("dcp.save", "dcp.async_save") and isinstance(held, int) and isinstance(of, int) \
                    and w > 1 and of > 0 and held > of * (1 / w + 0.25):
                return (f"world size {w}: rank {r.rank} handed dcp.save {held} of the state's {of} numbers as its "
                        "own: a full state dict, gathered on every rank, not each rank's shards (save the sharded "
                        "state dict)")
    return None


@functools.lru_cache(maxsize=16)
def _uninterrupted(seed: int, world_size: int, steps: int) -> tuple[torch.Tensor, ...]:
    x, y = data(seed)
    return tuple(adam_steps(x, y, range(steps), world_size))


def _without_optimizer_state(seed: int, world_size: int, first: int, counted: int) -> list[torch.Tensor]:
    """What a job resumed with the model's weights but not the optimizer's state would train: Adam's
    moments at zero and its step count at `counted` (get_state_dict initializes a new optimizer's state
    with one step of zero gradients, so 1 where the code called it, else 0)."""
    x, y = data(seed)
    model = make_mlp(0).double()
    adam_steps(x, y, range(first), world_size, model)
    adam = Adam(model.parameters(), lr=LR)
    for state in adam.state:
        state["step"] = counted
    return adam_steps(x, y, range(first, first + STEPS_PER_JOB), world_size, model, adam)


def _continues_uninterrupted(runs):
    seed = runs.params["seed"]
    start = flat(make_mlp(0))
    for world in runs:
        w = world.world_size
        jobs_before = (world.ranks[0].first("resume") or {}).get("jobs_before", 0)
        first = jobs_before * STEPS_PER_JOB
        want = _uninterrupted(seed, w, first + STEPS_PER_JOB)
        for r in world.ranks:
            failed = (r.first("loaded") or {}).get("error")
            if failed:
                return f"world size {w}: on rank {r.rank}, load raised {failed}: nothing was restored"
            loaded = r.kept_all("after load")
            if loaded and first and not torch.allclose(loaded[0], want[first - 1], **TOL):
                restarted = torch.allclose(loaded[0], start)
                return (f"world size {w}: after load on rank {r.rank}, the model "
                        + ("still holds its initial weights: nothing was loaded into it" if restarted else
                           f"differs from the one saved at world size {_previous(world)} by up to "
                           f"{(loaded[0] - want[first - 1]).abs().max().item():.3g}"))
            got = r.kept_all("after step")
            for k, (a, b) in enumerate(zip(got, want[first:])):
                if torch.allclose(a, b, **TOL):
                    continue
                fresh = any(torch.allclose(a, _without_optimizer_state(seed, w, first, counted)[k], **TOL)
                            for counted in (0, 1)) if first else False
                cause = (": the optimizer started afresh, so its moments and step count were not restored (save "
                         "and load the optimizer's state too)" if fresh else "")
                return (f"world size {w}: step {first + k + 1} (the job's step {k + 1}) on rank {r.rank} differs from "
                        f"one uninterrupted run by up to {(a - b).abs().max().item():.3g}{cause}")


def _previous(world) -> str:
    return str((world.ranks[0].first("resume") or {}).get("previous"))


EXERCISE = Exercise(
    id="3.5",
    title="a sharded checkpoint, resumed at another world size",
    kind="function",
    entry="save",
    params=lambda seed: {"seed": seed},
    world_sizes=CHAIN_SIZES,
    credit_per_world=False,  # one chain: a launch that fails leaves the next without its checkpoint
    work=_work,
    warm_imports=("torch._dynamo", "torch.distributed.fsdp", "torch.distributed.checkpoint",
                  "torch.distributed.checkpoint.state_dict"),
    timeout=40.0,
    checks=[
        Check("every rank takes part in every save and load", 2, _every_rank_saves_and_loads,
              hint=Hint(
                  idea="A distributed checkpoint is written and read by every rank, each its own shards, and the "
                       "ranks agree on the index first: DCP's save and load are collectives.",
                  section="6. Sharded checkpoints with `torch.distributed.checkpoint`",
                  where="save and load: the DCP calls, and any test of the rank around them.",
                  how="Call DCP's save in save and its load in load on every rank, with the directory you were "
                      "given, outside any test of the rank.",
                  lines_of=("enter:dcp.save", "enter:dcp.async_save", "enter:dcp.load"))),
        Check("each checkpoint holds one shard file per rank, none of them most of the state", 2, _holds_shards,
              hint=Hint(
                  idea="DCP saves sharded state as it is: one file of its own shards per rank, plus the .metadata "
                       "index. A full state dict, gathered first, puts the whole state on one rank.",
                  section="6. Sharded checkpoints with `torch.distributed.checkpoint`",
                  where="save: the state dicts you hand to DCP, how you got them and with which options.",
                  how="Hand DCP's save the sharded state dicts of the model and the optimizer, as the state-dict "
                      "helpers give them by default, without gathering them into full tensors first; write them "
                      "with DCP, not torch.save.",
                  lines_of=("enter:dcp.save", "enter:dcp.async_save", "enter:dcp.load"))),
        Check("resumed at each new world size, training continues exactly as one uninterrupted run", 3,
              _continues_uninterrupted, needs="all",  # a chain: a job that did not finish resumed nothing
              hint=Hint(
                  idea="A resumed run is the same run only if both the model's weights and the optimizer's state "
                       "(Adam's moments and step counts) are restored, resharded to the new world size.",
                  section="6. Sharded checkpoints with `torch.distributed.checkpoint`",
                  where="save, for what goes into the checkpoint; load, for what DCP fills in and how it gets back "
                        "into the model and the optimizer.",
                  how="Save the optimizer's state beside the model's. In load, build the state dicts to load into "
                      "from this job's model and optimizer, let DCP fill them in place, then hand them back to both "
                      "with the state-dict helpers' set functions.")),
    ],
)
