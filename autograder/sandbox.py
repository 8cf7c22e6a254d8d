"""The sandbox every submission runs in: bubblewrap, when this machine can run it.

What a submission's ranks get (see README, "What a submission can and cannot do"):

- a PID namespace of their own: nothing outside is visible, and nothing they start outlives
  the grading (the namespace dies with its first process);
- a network namespace with only a loopback interface;
- the whole filesystem read-only, with the home directories, the temporary directories, the
  directory the grader was started from and the course repository hidden behind empty
  ones; only the Python installation and the packages the ranks import are shown again,
  read-only; one private work directory is writable;
- an unprivileged user (``nobody`` when the grader runs as root), no capabilities, no new
  privileges;
- limits per rank on memory, file size and processes (set by the rank host).

``probe()`` tries the sandbox once per process and says why it cannot be used, if it cannot.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
# Not --unshare-all: as root that adds a user namespace in which root may not enter nobody's directory.
_NAMESPACES = ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/srv", "/run/user", "/dev/shm")
_SYSTEM = {Path(p) for p in ("/", "/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/opt", "/var", "/proc", "/dev", "/sys")}


@dataclass
class Sandbox:
    bwrap: str
    drop_to_nobody: bool  # the grader runs as root: the ranks run as nobody

    def wrap(self, command: list[str], writable: Path, hide: list[Path]) -> list[str]:
        """``command`` run inside the sandbox, with ``writable`` the one writable directory."""
        args = [self.bwrap, *_NAMESPACES, "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        hidden = _hidden(hide)
        for path in hidden:  # /tmp stays a usable temporary directory, empty and private
            args += (["--perms", "01777"] if path == Path("/tmp") else []) + ["--tmpfs", str(path)]
        args += ["--setenv", "TMPDIR", "/tmp", "--setenv", "HOME", "/tmp"]
        if self.drop_to_nobody:
            args += ["--setenv", "USER", "nobody", "--setenv", "LOGNAME", "nobody"]
        shown = _shown()
        for path in sorted({p for dest in [*shown, writable] for p in _parents_under(dest, hidden)},
                           key=lambda p: len(p.parts)):
            args += ["--perms", "0755", "--dir", str(path)]
        for path in shown:
            args += ["--ro-bind", str(path), str(path)]
        args += ["--bind", str(writable), str(writable), "--chdir", str(writable)]
        if self.drop_to_nobody:
            args += ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            args[1:1] = ["--unshare-user"]
            args += ["--cap-drop", "ALL"]
        return args + command

    def own(self, path: Path):
        """Make a directory the grader created writable for the ranks."""
        if self.drop_to_nobody:
            os.chown(path, NOBODY, NOBODY)


def _hidden(extra: list[Path]) -> list[Path]:
    home = Path(os.path.expanduser("~"))
    paths = {Path(p) for p in HIDDEN} | {home} | {Path(p).resolve() for p in extra}
    paths.add(Path(os.environ.get("TMPDIR", "/tmp")).resolve())
    kept = [p for p in paths if p.is_dir() and p not in _SYSTEM and not p.is_symlink()]
    return sorted(kept, key=lambda p: len(p.parts))


def _shown() -> list[Path]:
    """What the rank host must read: the interpreter, its libraries, the packages it imports."""
    import importlib.util

    packages = [Path(importlib.util.find_spec(name).origin).parent for name in ("autograder", "ddpcourse")]
    paths = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent, *packages}
    paths |= {Path(p) for p in sys.path if p and Path(p).is_dir()}
    paths = {p.resolve() for p in paths if p.exists()}
    setpriv = shutil.which("setpriv")
    if setpriv:
        paths.add(Path(setpriv).resolve().parent)
    return sorted(paths, key=lambda p: len(p.parts))


def _parents_under(dest: Path, hidden: list[Path]) -> list[Path]:
    """The directories between a hidden (emptied) directory and ``dest``, which bwrap must create."""
    found = []
    for top in hidden:
        if dest != top and top in dest.parents:
            found += [p for p in dest.parents if top in p.parents]
    return found


@functools.cache
def probe() -> tuple[Sandbox | None, str]:
    """The sandbox, or None and why this machine cannot have one.

    Whether bubblewrap really starts here (user namespaces may be disabled) is only known once
    it has started the rank host: ``RankHost`` says so, and the engine falls back or refuses.
    """
    if os.environ.get("AUTOGRADER_SANDBOX", "").lower() in ("0", "off", "no"):
        return None, "turned off by AUTOGRADER_SANDBOX=off"
    if not sys.platform.startswith("linux"):
        return None, "bubblewrap needs Linux"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None, "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    root = os.geteuid() == 0
    if root and not shutil.which("setpriv"):
        return None, "setpriv (util-linux) is needed to run the ranks as nobody"
    return Sandbox(bwrap, drop_to_nobody=root), ""
