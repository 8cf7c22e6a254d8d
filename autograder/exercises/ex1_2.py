"""Exercise 1.2: ring all-reduce from point-to-point messages: ring_all_reduce(tensor) sums in place.

Each rank's tensors are integers held as float32, so any order of summation gives the exact sum.
The messages are read from the trace (who sent how many bytes to whom, in which call), so a
solution that gets the right sum the wrong way (everything through rank 0) is told by its traffic.
"""

from __future__ import annotations

import torch

from autograder.checks import Check
from autograder.exercises import Exercise
from autograder.hints import Hint
from ddpcourse.given.ex1_2 import lengths, tensor_for


def _sum_on_every_rank(runs):
    seed = runs.params["seed"]
    for world in runs:
        w = world.world_size
        for case, length in enumerate(lengths(w)):
            want = sum(tensor_for(seed, rank, case, length) for rank in range(w))
            label = f"world size {w}, length {length}{_divides(length, w)}"
            for r in world.ranks:
                got = r.result[case]
                values = torch.tensor(got["in_place"], dtype=torch.float32)
                if values.shape == want.shape and torch.equal(values, want):
                    continue
                returned = got.get("returned")
                if returned is not None and torch.tensor(returned).shape == want.shape and \
                        torch.equal(torch.tensor(returned, dtype=torch.float32), want):
                    return (f"{label}: rank {r.rank} returned the sum but left its own tensor unchanged; "
                            "ring_all_reduce must sum in place, as dist.all_reduce does")
                wrong = (values != want).nonzero().flatten().tolist() if values.shape == want.shape else []
                if not wrong:
                    return f"{label}: rank {r.rank}'s tensor has {values.numel()} elements after the call"
                return (f"{label}: on rank {r.rank}, {len(wrong)} of the {length} elements differ from the "
                        f"sum over the ranks, elements {_spans(wrong)} (element {wrong[0]} is "
                        f"{values[wrong[0]].item():g}, the sum {want[wrong[0]].item():g})")


def _divides(length: int, w: int) -> str:
    if w == 1:
        return ""
    return " (shorter than the world size)" if length < w else \
        (" (a multiple of the world size)" if length % w == 0 else " (not a multiple of the world size)")


def _spans(indices: list[int]) -> str:
    spans, start = [], indices[0]
    for a, b in zip(indices, indices[1:] + [None]):
        if b != a + 1:
            spans.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(spans[:4]) + (", ..." if len(spans) > 4 else "")


def _no_builtin_collective(runs):
    for world in runs:
        for r in world.ranks:
            for case, events in sorted(r.windows("case", "case_done").items()):
                used = [e for e in events if e.get("kind") == "collective" and e.get("caller")]
                if used:
                    return (f"{world.label}: rank {r.rank} called dist.{used[0]['op']} at "
                            f"{used[0]['caller']}; build the all-reduce from send and recv alone")


def _ring_traffic(runs):
    for world in sorted(runs, key=lambda w: -w.world_size):  # the largest ring shows the traffic best
        w = world.world_size
        problem = _sizes_per_rank(world, w) or _one_ring(world, w)
        if problem:
            return problem


def _one_ring(world, w: int) -> str | None:
    """Every rank sends to one neighbour only, and following the neighbours visits every rank: one ring."""
    if w < 3:
        return None  # with two ranks every exchange is between neighbours
    to = {}
    for r in world.ranks:
        peers = sorted({peer for way, peer, _, _ in r.messages() if way == "send" and isinstance(peer, int)})
        if len(peers) > 1:
            return (f"world size {w}: rank {r.rank} sent messages to ranks {peers}; in a ring every rank sends to "
                    f"one neighbour only, (rank + 1) % {w}, and receives from the other")
        if peers:
            to[r.rank] = peers[0]
    seen, at = [], 0
    while at in to and at not in seen:
        seen.append(at)
        at = to[at]
    if len(to) == w and len(seen) != w:
        return (f"world size {w}: the ranks send to {[to[k] for k in sorted(to)]} (rank by rank), which is no single "
                f"ring through all {w} ranks")
    return None


def _sizes_per_rank(world, w: int) -> str | None:
    """Each rank's messages of each case: 2(W-1) of them, none more than a chunk, 2(W-1)/W of the tensor in all."""
    for r in world.ranks:
        for case, events in sorted(r.windows("case", "case_done").items()):
            length = lengths(w)[case]
            if length < w or any(e.get("kind") == "collective" and e.get("caller") for e in events):
                continue  # empty chunks may be skipped; built-in collectives are charged elsewhere
            sent = [size for way, _, size, _ in r.messages(events) if way == "send"]
            chunk = -(-length // w) * 4
            low, high = 2 * (w - 1) * (length // w) * 4, 2 * (w - 1) * chunk
            if len(sent) != 2 * (w - 1) or not low <= sum(sent) <= high or max(sent, default=0) > chunk:
                share = f"{2 * (w - 1) / w:g}x"
                return (f"world size {w}, length {length} ({length * 4} bytes): rank {r.rank} sent "
                        f"{len(sent)} message(s) of {sorted(set(sent))[:4]} bytes, {sum(sent)} in all; a ring sends "
                        f"{2 * (w - 1)} messages of one chunk (at most {chunk} bytes) each, 2(W-1)/W = {share} the "
                        f"tensor in all ({low}-{high} bytes)" + (", the same on every rank" if w > 1 else ""))
    return None


def _work(runs):
    if not any(w.world_size > 1 for w in runs):
        return None  # one process sends nothing: no sign either way
    if not any(way == "send" for w in runs if w.world_size > 1 for r in w.ranks for way, *_ in r.messages()):
        return "no rank sent a message with send or isend: the ring is built from them"


HINTS = {
    "sum": Hint(
        idea="ring_all_reduce leaves the exact sum over the ranks in the very tensor it was given, for every "
             "length: also one the world size does not divide, and one shorter than the world size.",
        section="The ring's schedule",
        where="Look at how `ring_all_reduce` cuts the tensor into chunks (what becomes of the remainder when the "
              "world size does not divide the length), which chunk each step sends and receives, and whether "
              "what you receive is written into the tensor's own chunks or into a copy.",
        how="Cut the tensor into W chunks whose sizes differ by at most one, computed the same way on every rank "
            "so that a sender and its receiver agree on each size, and make sure the sums end up in the tensor "
            "itself (chunks that are views of it do that); then check each step's chunk indices against the "
            "lesson's schedule."),
    "no_builtin": Hint(
        idea="The exercise builds the all-reduce itself from point-to-point messages: a built-in collective "
             "would do the work for you, so none may be called.",
        section="4. How an all-reduce works",
        where="Look for a call of a `torch.distributed` collective (all_reduce, broadcast, all_gather...) inside "
              "`ring_all_reduce` or a helper it calls.",
        how="Replace it by messages between neighbours: in each step every rank sends one chunk to the next "
            "rank of the ring and receives one from the previous rank, with send and recv or their "
            "non-blocking versions.",
        lines_of=("collective",)),
    "ring": Hint(
        idea="A ring sends 2(W-1) messages per rank, each one chunk of about 1/W of the tensor, always to the "
             "same neighbour: that keeps each rank's traffic under twice the tensor however many ranks there are.",
        section="4. How an all-reduce works",
        where="Look at the loops of `ring_all_reduce`: how many steps each one runs, what each step sends (one "
              "chunk or a whole tensor), and to which rank.",
        how="Run W-1 steps of reduce-scatter and then W-1 steps of all-gather, each sending exactly one chunk to "
            "the next rank of the ring and receiving one from the previous rank; whole tensors, or everything "
            "gathered on rank 0, give the right sum with the wrong traffic.",
        lines_of=("enter",)),
}


EXERCISE = Exercise(
    id="1.2",
    title="ring all-reduce from send and recv",
    kind="function", on_cpu=True,
    entry="ring_all_reduce",
    params=lambda seed: {"seed": seed},
    work=_work,
    world_sizes=(1, 2, 3, 4),
    checks=[
        Check("every rank holds the sum over the ranks, in place, for every length", 5, _sum_on_every_rank,
              hint=HINTS["sum"]),
        Check("only point-to-point messages: no built-in collective", 2, _no_builtin_collective, needs="partial",
              hint=HINTS["no_builtin"]),
        Check("ring traffic: 2(W-1) messages per rank, each about 1/W of the tensor", 3, _ring_traffic,
              hint=HINTS["ring"]),
    ],
)
