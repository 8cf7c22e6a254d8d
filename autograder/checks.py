"""Checks: named by what they verify, each worth points, judged on every world size.

A check's ``verify(runs)`` returns ``None`` when what it verifies holds, or a message
saying what was seen (and on which rank) when it does not; it raises ``Skip`` when it
cannot mean anything on this machine. ``needs`` says what evidence the check must have:

- "complete": every launch ran to the end on every rank; otherwise the check reports
  why it could not be judged (the crash or the hang), as an error or a timeout;
- "partial": the check may *fail* on what was seen before a crash or a hang (a rank that
  called a collective the others never called), but can only *pass* on complete runs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch

from autograder.evidence import WorldRun
from autograder.report import CheckResult


SKIPPED_ON_CPU = "only meaningful with one GPU per rank (nccl); this run used gloo on CPUs"


class Skip(Exception):
    """The check cannot be judged here; the message says why."""


@dataclass
class Runs:
    """Everything the checks of one grading see."""

    worlds: list[WorldRun]
    backend: str
    params: dict

    def __iter__(self):
        return iter(self.worlds)

    @property
    def complete(self) -> bool:
        return all(w.complete for w in self.worlds)

    def first_incomplete(self) -> WorldRun | None:
        return next((w for w in self.worlds if not w.complete), None)


@dataclass
class Check:
    name: str
    points: float
    verify: Callable[[Runs], str | None]
    hint: str = ""
    needs: str = "complete"
    gpu_only: bool = False

    def judge(self, runs: Runs) -> CheckResult:
        def result(status: str, message: str = "") -> CheckResult:
            return CheckResult(self.name, status, self.points if status == "passed" else 0, self.points, message)

        if self.gpu_only and runs.backend != "nccl":
            return result("skipped", SKIPPED_ON_CPU)
        broken = runs.first_incomplete()
        if broken is not None and self.needs == "complete":
            return _could_not_judge(result, broken)
        try:
            message = self.verify(runs)
        except Skip as skip:
            return result("skipped", str(skip))
        if message:
            return result("failed", message + (f"\nHint: {self.hint}" if self.hint else ""))
        if broken is not None:
            return _could_not_judge(result, broken)
        return result("passed")


def _could_not_judge(result, broken: WorldRun) -> CheckResult:
    status = "timeout" if broken.hung or broken.timed_out else "error"
    return result(status, f"not judged: world size {broken.world_size} did not complete (see above)")


# Verifications shared by several exercises ------------------------------------------------


def each_rank(runs: Runs):
    """(world, rank) for every rank of every launch, smallest world first."""
    for world in runs:
        for r in world.ranks:
            yield world, r



def params_identical_across_ranks(runs: Runs, atol: float = 1e-6) -> str | None:
    for world in runs:
        base = world.ranks[0].snapshots
        if not base and world.world_size > 1:
            return f"world size {world.world_size}: no trained parameters were seen on rank 0 (no optimizer step)"
        for r in world.ranks[1:]:
            if len(r.snapshots) != len(base):
                return (f"world size {world.world_size}: rank 0 took {len(base)} steps but rank {r.rank} "
                        f"took {len(r.snapshots)}")
            for step, ((label, a), (_, b)) in enumerate(zip(base, r.snapshots)):
                gap = (a - b).abs().max().item()
                if gap > atol:
                    return (f"world size {world.world_size}: after {label} #{step + 1}, rank {r.rank}'s parameters "
                            f"differ from rank 0's by up to {gap:.3g}")
    return None


def matches_reference(runs: Runs, reference: Callable[[WorldRun], torch.Tensor], what: str,
                      rtol: float = 1e-4, atol: float = 1e-5) -> str | None:
    for world in runs:
        got = world.ranks[0].final_params()
        if got is None:
            return f"world size {world.world_size}: rank 0 never stepped an optimizer, so there is nothing to compare"
        want = reference(world)
        if got.shape != want.shape:
            return f"world size {world.world_size}: the trained model has {got.numel()} parameters, the reference {want.numel()}"
        if not torch.allclose(got, want, rtol=rtol, atol=atol):
            gap = (got - want).abs().max().item()
            ratio = _ratio(got, want, runs, world)
            return (f"world size {world.world_size}: rank 0's final parameters differ from {what} by up to {gap:.3g}"
                    + (f" ({ratio})" if ratio else ""))
    return None


def _ratio(got: torch.Tensor, want: torch.Tensor, runs: Runs, world: WorldRun) -> str:
    """Name the classic mistake when the update was a whole multiple of the reference's."""
    start = runs.params.get("initial")
    if start is None or world.world_size == 1:
        return ""
    moved, expected = got - start, want - start
    scale = (moved @ expected / (expected @ expected)).item() if expected.norm() > 0 else 0.0
    if abs(scale - world.world_size) < 0.05 * world.world_size:
        return f"the parameters moved {scale:.2f} times as far as the reference: gradients summed, not averaged"
    return ""


def every_rank_calls_the_same_collectives(runs: Runs) -> str | None:
    for world in runs:
        if world.world_size == 1:
            continue
        stuck = [(r, r.pending_collective()) for r in world.ranks
                 if (r.exitcode is None or r.error) and r.pending_collective()]
        for r, event in stuck:
            others = [o.rank for o in world.ranks if o.rank != r.rank and _calls(o).count(event["op"]) < _calls(r).count(event["op"])]
            if others:
                return (f"world size {world.world_size}: rank {r.rank} waits in {event['op']} called at "
                        f"{event['caller']}, which rank(s) {', '.join(map(str, others))} never called")
        sequences = {r.rank: _calls(r) for r in world.ranks if r.finished}
        if len(set(map(tuple, sequences.values()))) > 1:
            detail = "; ".join(f"rank {k}: {', '.join(v) or 'none'}" for k, v in sequences.items())
            return f"world size {world.world_size}: the ranks called different collectives ({detail})"
    return None


def _calls(rank) -> list[str]:
    return [e["op"] for e in rank.of("collective") if e.get("caller")]


def shares_disjoint_and_covering(per_rank: dict[int, list[int]], n: int, world_size: int, label: str) -> str | None:
    """Each sample index in exactly one rank's share (world_size > 1 also means shares must differ)."""
    counts = Counter(i for share in per_rank.values() for i in share)
    missing = [i for i in range(n) if counts[i] == 0]
    repeated = sorted(i for i, c in counts.items() if c > 1)
    if world_size > 1 and all(sorted(s) == list(range(n)) for s in per_rank.values()):
        return f"{label}: every rank saw the whole dataset ({n} samples): the ranks did not split the data"
    if repeated:
        owners = {i: [r for r, s in per_rank.items() if i in s] for i in repeated[:3]}
        shown = ", ".join(f"sample {i} on ranks {owners[i]}" for i in owners)
        return f"{label}: {len(repeated)} sample(s) seen by more than one rank ({shown})"
    if missing:
        return f"{label}: {len(missing)} sample(s) seen by no rank (e.g. {missing[:5]})"
    return None
