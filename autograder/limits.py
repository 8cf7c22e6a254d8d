"""Limits on a whole submission: everything one rank host runs, together, not one process at a time.

Per-process limits (the rank host sets them on each rank: address space, file size, processes of
its user) stop one greedy rank, but not seven children of 1 GB each, nor eight files of 200 MB.
So each rank host runs in a control group of its own, made here before it starts:

- memory: every process of the submission, and the files it writes in the sandbox's temporary
  file systems (their pages are its memory too), at most ``memory_mb`` together; past that the
  kernel kills one of them, and the report says the submission ran out of memory;
- processes and threads: at most ``processes`` together;
- on close, whatever is still in the group is killed, and the group removed.

cgroup v2 where the grader's own group may have children with those controllers, else cgroup v1's
memory and pids hierarchies (writable as root), else none: then the per-process limits and the
size-capped work directory are all there is, and the report says so (``probe``).
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from autograder.files import gone

PREFIX = "autograder-"
_made = itertools.count()


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096  # the whole submission: every process, and what it writes in /work and /tmp
    processes: int = 1024  # processes and threads, together
    work_mb: int = 1024  # the sandbox's work directory (a tmpfs)
    tmp_mb: int = 256  # its /tmp (a tmpfs)

    @classmethod
    def from_environment(cls) -> "Limits":
        """The defaults, or AUTOGRADER_MEMORY_MB, AUTOGRADER_PROCESSES, AUTOGRADER_WORK_MB, AUTOGRADER_TMP_MB."""
        given = {name: os.environ.get(f"AUTOGRADER_{name.upper()}") for name in cls.__dataclass_fields__}
        return cls(**{k: int(v) for k, v in given.items() if v and v.isdigit() and int(v) > 0})

    def describe(self) -> str:
        return f"{self.memory_mb} MB of memory and {self.processes} processes in all"


class Group:
    """One control group (v2), or one per v1 hierarchy, for everything one rank host runs."""

    def __init__(self, paths: list[Path], version: int):
        self.paths, self.version = paths, version

    @classmethod
    def create(cls, limits: Limits) -> tuple["Group | None", str]:
        """The group, limits set; or None and why this machine gives none."""
        remove_stale()
        tried = []
        for version, parents in ((2, _v2_parents()), (1, _v1_parents())):
            if not parents:
                continue
            name = f"{PREFIX}{os.getpid()}-{next(_made)}"
            group = cls([parent / name for parent in parents], version)
            try:
                group._make(limits)
                return group, ""
            except OSError as exc:
                group.remove()
                tried.append(f"cgroup v{version}: {exc.strerror or exc}")
        return None, "; ".join(tried) or "no writable cgroup hierarchy with the memory and pids controllers"

    def _make(self, limits: Limits):
        memory = limits.memory_mb << 20
        for path in self.paths:
            path.mkdir()
        if self.version == 2:
            (self.paths[0] / "memory.max").write_text(str(memory))
            _write_if_there(self.paths[0] / "memory.swap.max", "0")
            (self.paths[0] / "pids.max").write_text(str(limits.processes))
            return
        memory_group, pids_group = self.paths
        (memory_group / "memory.limit_in_bytes").write_text(str(memory))
        _write_if_there(memory_group / "memory.memsw.limit_in_bytes", str(memory))
        (pids_group / "pids.max").write_text(str(limits.processes))

    def joined(self, command: list[str]) -> list[str]:
        """``command`` run inside the group: a shell writes its own pid into each group, then becomes it."""
        files = [str(path / "cgroup.procs") for path in self.paths]
        join = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", join, "sh", *files, "--", *command]

    def oom_kills(self) -> int:
        """Processes the kernel killed in this group for want of memory."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            for line in (self.paths[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def pids(self) -> set[int]:
        found = set()
        for path in self.paths:
            try:
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
            except (OSError, ValueError):
                pass
        return found

    def remove(self):
        """Kill whatever is left in the group, then remove it."""
        deadline = time.monotonic() + 5
        while True:
            left = self.pids()
            if not left or time.monotonic() > deadline:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)
        for path in self.paths:
            try:
                path.rmdir()
            except OSError:
                pass


def remove_stale():
    """Groups of graders that are gone (killed before they could remove theirs), once empty."""
    for parent in {*_v2_parents(), *_v1_parents()}:
        try:
            names = [p for p in parent.iterdir() if p.name.startswith(PREFIX)]
        except OSError:
            continue
        for path in names:
            if gone(path.name, PREFIX):
                Group([path], 0).remove()


def _write_if_there(path: Path, value: str):
    if path.exists():
        path.write_text(value)


def _own_groups() -> dict[str, str]:
    """This process's group in each hierarchy: "" for v2's, else the controller's name -> path."""
    found = {}
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                found[controller] = path
    except (OSError, ValueError):
        pass
    return found


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, file system type, its options) of the cgroup file systems."""
    found = []
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            dash = fields.index("-")
            kind, options = fields[dash + 1], set(fields[dash + 3].split(","))
            if kind in ("cgroup", "cgroup2"):
                found.append((fields[4], kind, options))
    except (OSError, ValueError, IndexError):
        pass
    return found


def _v2_parents() -> list[Path]:
    own = _own_groups().get("")
    for point, kind, _ in _mounts():
        if kind == "cgroup2" and own is not None:
            parent = Path(point) / own.lstrip("/")
            try:
                enabled = set((parent / "cgroup.subtree_control").read_text().split())
            except OSError:
                continue
            if {"memory", "pids"} <= enabled and os.access(parent, os.W_OK):
                return [parent]
    return []


def _v1_parents() -> list[Path]:
    own, found = _own_groups(), {}
    for point, kind, options in _mounts():
        for controller in ("memory", "pids"):
            if kind == "cgroup" and controller in options and controller in own:
                found[controller] = Path(point) / own[controller].lstrip("/")
    parents = [found.get("memory"), found.get("pids")]
    if None in parents or not all(os.access(p, os.W_OK) for p in parents):
        return []
    return parents
