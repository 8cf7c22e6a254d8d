"""What the grader knows after a launch: each rank's exit, output and recorded trace.

All of it was written by the submission, so it is read as capped plain data (files.py) and
checked for shape here: a malformed trace makes the rank count as one that did not finish,
never a crash of the grader.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import numpy as np
import torch

from autograder import files
from autograder.launch import LaunchResult, Layout, Stall

# Errors a rank raises because a peer is gone, not because of its own code.
_PEER_GONE = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "recvBytes", "sendBytes",
              "Socket Timeout", "Connection refused", "DistStoreError", "Timed out", "timed out")


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
    tampered: list[str] = field(default_factory=list)  # instrumentation the submission replaced
    order: int | None = None  # position among the ranks that ended

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("kind") == kind]

    def first(self, kind: str) -> dict | None:
        found = self.of(kind)
        return found[0] if found else None

    def kept(self, label: str) -> torch.Tensor | None:
        """The first vector the harness kept under `label` (Recorder.keep), or None."""
        return next((v for k, v in self.snapshots if k == label), None)

    def kept_all(self, label: str) -> list[torch.Tensor]:
        """Every vector kept or snapshotted under `label`, in order."""
        return [v for k, v in self.snapshots if k == label]

    def kept_parts(self, label: str, shapes) -> list[torch.Tensor] | None:
        """The tensors rig.keep_parts kept as one vector, reshaped; None if missing or of another size."""
        flat = self.kept(label)
        sizes = [int(np.prod(s)) for s in shapes]
        if flat is None or flat.numel() != sum(sizes):
            return None
        return [t.reshape(s) for t, s in zip(flat.split(sizes), shapes)]

    def windows(self, start: str, end: str) -> dict[int, list[dict]]:
        """The events between each harness marker `start` (which carries an index) and the next `end`, by index."""
        found, current = {}, None
        for e in self.events:
            if e.get("kind") == start:
                current = found.setdefault(e.get("index"), [])
            elif e.get("kind") == end:
                current = None
            elif current is not None:
                current.append(e)
        return found

    def messages(self, events: list[dict] | None = None) -> list[tuple[str, object, int, str | None]]:
        """("send" or "recv", peer, bytes, caller) for every point-to-point message, single or batched, in order."""
        found = []
        for e in self.events if events is None else events:
            if e.get("kind") != "enter":
                continue
            for o in e.get("ops", []) if e.get("call") == "batch_isend_irecv" else [e]:
                op = o.get("op", o.get("call"))
                if op in ("send", "isend", "recv", "irecv"):
                    found.append(("send" if op in ("send", "isend") else "recv", o.get("peer"), o.get("bytes", 0),
                                  e.get("caller")))
        return found

    @property
    def ok(self) -> bool:
        return self.exitcode == 0 and self.finished and self.error is None

    def pending_collective(self) -> dict | None:
        """The collective this rank entered and never left, if any."""
        calls = [e for e in self.events if e.get("kind") in ("collective", "collective_done")]
        return calls[-1] if calls and calls[-1]["kind"] == "collective" else None

    def pending_call(self) -> dict | None:
        """The blocking call (group, collective, message, spawn) this rank entered and never left."""
        calls = [e for e in self.events if e.get("kind") in ("enter", "leave")]
        return calls[-1] if calls and calls[-1]["kind"] == "enter" else None

    def where_it_ended(self, save: dict) -> str | None:
        """Where the file a save wrote ended up: its path, followed through the renames this rank made after
        it (a snapshot written beside its place, then os.replace()d onto it)."""
        path = save.get("path")
        for e in self.of("placed"):
            if e.get("how") == "rename" and e.get("seq", 0) > save.get("seq", 0) and e.get("source") == path:
                path = e.get("path")
        return path if isinstance(path, str) else None

    def final_params(self) -> torch.Tensor | None:
        return self.snapshots[-1][1] if self.snapshots else None

    def exception_line(self) -> str:
        """The traceback's last line, "TypeError: ...", with a message of several lines joined."""
        lines = (self.error or "").strip().splitlines()
        start = next((k for k in range(len(lines) - 1, -1, -1) if self.error_type
                      and lines[k].startswith(f"{self.error_type}:")), len(lines) - 1)
        return " ".join(line.strip() for line in lines[start:]) if lines else ""

    @property
    def peer_gone(self) -> bool:
        """It failed because another rank was gone (a victim), as far as its error says."""
        return bool(self.error) and any(marker in self.error for marker in _PEER_GONE)

    def how_it_ended(self) -> str:
        if self.error:
            return f"raised {self.exception_line()[:300]}"
        if self.exitcode is None and not self.events:
            return "never started"
        if self.exitcode is None:
            return "was stopped by the grader"
        if self.exitcode < 0:
            return f"was killed by {_signal_name(-self.exitcode)}"
        if self.exitcode == 0 and not self.finished:
            return "exited with code 0 before its code returned (os._exit, or its trace was removed)"
        if not self.finished:
            return f"exited with code {self.exitcode} before its code returned (sys.exit or os._exit)"
        return f"exited with code {self.exitcode}"


@dataclass
class WorldRun:
    """One launch at one world size."""

    layout: Layout
    ranks: list[RankRecord]
    stall: Stall | None
    timed_out: bool
    elapsed: float
    workdir: PurePosixPath  # where the ranks saw their directory: compared with paths they recorded, never opened
    timeout: float = 0.0
    host_failure: str = ""
    exports: dict[str, dict] = field(default_factory=dict)  # path a rank saved to -> what it held
    stopped_at: float | None = None  # when the grader stopped a hang (wall clock, as the trace's times)
    # A torchrun job: its name, every attempt's ranks (the last is `ranks`), each agent's exit code
    # (None: stopped by the grader) and what the agents printed.
    job: str = ""
    attempts: list[list[RankRecord]] = field(default_factory=list)
    agents: dict[int, int | None] = field(default_factory=dict)
    agent_output: str = ""
    unmet: float | None = None  # seconds the agents waited with no worker before the grader stopped them
    duplicates: list[str] = field(default_factory=list)  # "attempt K: rank R, agent A": a RANK taken twice
    plan: object = None  # the jobs.Job this launch ran
    load: float = 0.0  # runnable processes per CPU when the time limit passed
    folder: files.Folder | None = None  # the launch's directory, as the grader reads it
    grading: files.Folder | None = None  # the directory of the grading it belongs to (the launch's parent)
    out_of_memory: bool = False  # the kernel killed a process of the submission for want of memory
    disk_full: bool = False  # the sandbox's file systems were full when the launch ended
    faults: list[dict] = field(default_factory=list)  # the planted faults that landed (4.2), as the host said

    @property
    def label(self) -> str:
        """How a report names this launch: "world size 2", or the job's own name."""
        return self.job or f"world size {self.world_size}"

    @property
    def world_size(self) -> int:
        return self.layout.world_size

    @property
    def hung(self) -> bool:
        return self.stall is not None or self.abandoned() is not None

    @property
    def complete(self) -> bool:
        return not self.host_failure and all(r.ok for r in self.ranks) and all(c == 0 for c in self.agents.values())

    def abandoned(self) -> RankRecord | None:
        """A rank that failed inside a collective after other ranks finished without calling it.

        In a real job that rank would wait until the group's timeout; here the others' exit closed
        its connections and gloo raised instead (or, rarely, the process aborted in native code).
        Either way it is a hang, and is reported as one.
        """
        if not any(r.ok for r in self.ranks):
            return None
        return next((r for r in self.ranks
                     if (r.error or (r.exitcode or 0) < 0) and r.exitcode is not None and r.pending_collective()), None)

    def culprit(self) -> RankRecord | None:
        """The first rank to end by a failure of its own; ranks that failed because it was gone are victims."""
        left_waiting = self.abandoned()
        own = [r for r in self.ranks if r.exitcode is not None and not r.ok and not r.peer_gone
               and not (r.exitcode == 0 and r.finished) and r is not left_waiting]
        own.sort(key=lambda r: r.order if r.order is not None else len(self.ranks))
        return own[0] if own else None


def load(launch: LaunchResult, plan=None) -> WorldRun:
    """What the grader knows of one launch; ``plan`` is its jobs.Job, for a torchrun job."""
    job = plan.name if plan is not None else ""
    if launch.attempts or job:
        attempts = [_ranks(a.folder, a.ranks, a.events, a.events_sha256) for a in launch.attempts]
        ranks = attempts[-1] if attempts else [RankRecord(e.rank, e.exitcode, "", "") for e in launch.ranks]
    else:
        attempts, ranks = [], _ranks(launch.folder, launch.ranks, launch.events, launch.events_sha256)
    return WorldRun(launch.layout, ranks, launch.stall, launch.timed_out, launch.elapsed, launch.workdir,
                    launch.timeout, launch.host_failure, stopped_at=launch.stopped_at, job=job, attempts=attempts,
                    agents=launch.agents, agent_output=launch.agent_output, unmet=launch.unmet, plan=plan, load=launch.load,
                    duplicates=[f"attempt {a.number}: {d}" for a in launch.attempts for d in a.duplicates],
                    folder=launch.folder, out_of_memory=launch.out_of_memory, disk_full=launch.disk_full,
                    faults=launch.faults[:16])


def _ranks(folder: files.Folder, exits, events: dict, digests: dict) -> list[RankRecord]:
    return [_rank(folder, exit, events, digests) for exit in exits]


def _rank(folder: files.Folder, exit, events: dict, digests: dict) -> RankRecord:
    rec = RankRecord(exit.rank, exit.exitcode, exit.output, exit.stack, order=exit.order)
    rec.events = events.get(exit.rank, [])
    data = folder.read_json(f"rank{exit.rank}.result.json")
    if not isinstance(data, dict):
        return rec
    error, error_type = data.get("error"), data.get("error_type")
    rec.error = error[-20000:] if isinstance(error, str) else None
    rec.error_type = error_type[:200] if isinstance(error_type, str) else None
    rec.result = data.get("result")
    tampered = data.get("tampered")
    rec.tampered = [str(t)[:200] for t in tampered[:20]] if isinstance(tampered, list) else ["the trace"]
    if data.get("events_sha256") != digests.get(exit.rank):
        rec.tampered.append("the event log was written to by the submission")
    labels = data.get("snapshot_labels")
    if isinstance(labels, list) and labels:
        array = folder.read_array(f"rank{exit.rank}.snapshots.npy")
        if isinstance(array, np.ndarray) and array.ndim == 2 and len(array) == len(labels):
            rec.snapshots = [(str(label), torch.from_numpy(row.astype(np.float64))) for label, row in zip(labels, array)]
        else:
            rec.tampered.append("the parameter snapshots")
    rec.finished = True
    return rec


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
