"""What the grader knows after a launch: each rank's exit, output and recorded trace."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from autograder.launch import LaunchResult, Layout


@dataclass
class RankRecord:
    rank: int
    exitcode: int | None
    output: str
    stack: str
    events: list[dict] = field(default_factory=list)
    snapshots: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    result: Any = None
    error: str | None = None
    error_type: str | None = None
    finished: bool = False  # the rank saved its trace: it got to the end, with or without an error

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["kind"] == kind]

    def first(self, kind: str) -> dict | None:
        found = self.of(kind)
        return found[0] if found else None

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.finished and self.error is None

    def pending_collective(self) -> dict | None:
        """The collective this rank entered and never left, if any."""
        calls = [e for e in self.events if e["kind"] in ("collective", "collective_done")]
        return calls[-1] if calls and calls[-1]["kind"] == "collective" else None

    def final_params(self) -> torch.Tensor | None:
        return self.snapshots[-1][1] if self.snapshots else None


@dataclass
class WorldRun:
    """One launch at one world size."""

    layout: Layout
    ranks: list[RankRecord]
    hung: bool
    timed_out: bool
    elapsed: float
    workdir: Path

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def complete(self) -> bool:
        return all(r.ok for r in self.ranks)

    def abandoned(self) -> RankRecord | None:
        """A rank that failed inside a collective after other ranks finished without calling it.

        In a real job that rank would wait forever; here the others' exit closed its connections
        and gloo raised instead. Either way it is a hang, and is reported as one.
        """
        if not any(r.ok for r in self.ranks):
            return None
        return next((r for r in self.ranks if r.error and r.pending_collective()), None)

    def failed_rank(self) -> RankRecord | None:
        """The rank to blame first: one that raised, else one that died, else one that hung."""
        for test in (lambda r: r.error, lambda r: r.exitcode not in (0, None), lambda r: r.exitcode is None):
            for r in self.ranks:
                if test(r):
                    return r
        return None

    def summary(self) -> str:
        """One line saying why this run did not complete."""
        r = self.failed_rank()
        if r is None:
            return f"world size {self.world_size} completed"
        if r is self.abandoned():
            call = r.pending_collective()
            gone = [o.rank for o in self.ranks if o.ok]
            return (f"world size {self.world_size}: rank {r.rank} hung in {call['op']} ({call['caller']}), "
                    f"which rank(s) {', '.join(map(str, gone))} finished without calling")
        if r.error:
            last = r.error.strip().splitlines()[-1]
            return f"world size {self.world_size}: rank {r.rank} raised {last}"
        if r.exitcode is None:
            what = "was still running at the time limit" if self.timed_out else "hung after the others finished"
            return f"world size {self.world_size}: rank {r.rank} {what}"
        if not r.finished:
            return f"world size {self.world_size}: rank {r.rank} exited with code {r.exitcode} before the end"
        return f"world size {self.world_size}: rank {r.rank} exited with code {r.exitcode}"


def load(launch: LaunchResult) -> WorldRun:
    ranks = []
    for exit in launch.ranks:
        rec = RankRecord(exit.rank, exit.exitcode, exit.output, exit.stack)
        trace = launch.workdir / f"rank{exit.rank}.trace"
        if trace.exists():
            data = torch.load(trace, weights_only=False)
            rec.events, rec.snapshots, rec.result = data["events"], data["snapshots"], data["result"]
            rec.error, rec.error_type, rec.finished = data["error"], data["error_type"], True
        else:
            rec.events = _read_events(launch.workdir / f"rank{exit.rank}.events")
        ranks.append(rec)
    world = WorldRun(launch.layout, ranks, launch.hung, launch.timed_out, launch.elapsed, launch.workdir)
    world.hung = world.hung or world.abandoned() is not None
    return world


def _read_events(path: Path) -> list[dict]:
    events = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                break  # the rank was killed mid-line
    return events
