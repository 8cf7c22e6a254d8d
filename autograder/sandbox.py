"""The sandbox every submission runs in: bubblewrap, when this machine can run it.

What a submission's ranks get (see README, "What a submission can and cannot do"):

- a PID namespace of their own: nothing outside is visible, and nothing they start outlives
  the grading (the namespace dies with its first process);
- a network namespace with only a loopback interface;
- a minimal /dev, plus the GPU device nodes the machine has (nccl ranks need them; gloo ranks
  are launched with CUDA_VISIBLE_DEVICES empty, so CUDA does not use them);
- the whole filesystem read-only, with the home directories, the temporary directories, the
  directory the grader was started from and the course repository hidden behind empty
  ones; only the Python installation and the packages the ranks import are shown again,
  read-only; one private work directory is writable;
- an unprivileged user, no capabilities, no new privileges: when the grader runs as root, a
  user id of its own, unused by anyone else, so that the process limit of one submission (a
  fork bomb) cannot starve another graded at the same time;
- limits per rank on memory, file size and processes (set by the rank host).

``probe()`` tries the sandbox once per process and says why it cannot be used, if it cannot.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

FIRST_UID = 1_000_000  # user ids given to sandboxes: one per rank host, from the grader's pid
_hosts_started = itertools.count()
# Not --unshare-all: as root that adds a user namespace in which root may not enter the sandbox user's directory.
_NAMESPACES = ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/mnt", "/media", "/srv", "/run/user", "/dev/shm")
_KEPT = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
         "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "TERM"}
_KEPT_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "NVPL_", "CUDA_", "NVIDIA_", "NCCL_", "GLOO_", "TORCH_",
                  "AUTOGRADER_")
HOSTNAME = "sandbox"
_HOSTS = f"127.0.0.1 localhost {HOSTNAME}\n::1 localhost\n::ffff:127.0.0.1 localhost\n"
_SYSTEM = {Path(p) for p in ("/", "/usr", "/etc", "/bin", "/lib", "/lib64", "/sbin", "/opt", "/var", "/proc", "/dev", "/sys")}


@dataclass
class Sandbox:
    bwrap: str
    drop_privileges: bool  # the grader runs as root: the ranks run as the user `uid`, with no privileges
    uid: int | None = None

    def fresh(self) -> "Sandbox":
        """The sandbox for one more rank host: as root, with a user id no other sandbox has."""
        if not self.drop_privileges:
            return self
        return replace(self, uid=FIRST_UID + (os.getpid() % 4_000_000) * 64 + next(_hosts_started) % 64)

    def wrap(self, command: list[str], writable: Path, hide: list[Path]) -> list[str]:
        """``command`` run inside the sandbox, with ``writable`` the one writable directory."""
        args = [self.bwrap, *_NAMESPACES, "--die-with-parent", "--new-session",
                "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
        for node in gpu_device_nodes():
            args += ["--dev-bind", str(node), str(node)]
        hidden = _hidden(hide)
        for path in hidden:  # /tmp stays a usable temporary directory, empty and private
            args += (["--perms", "01777"] if path == Path("/tmp") else []) + ["--tmpfs", str(path)]
        args += ["--clearenv", *_kept_environment(), "--setenv", "TMPDIR", "/tmp", "--setenv", "HOME", "/tmp"]
        if self.drop_privileges:
            args += ["--setenv", "USER", "student", "--setenv", "LOGNAME", "student"]
        shown = _shown()
        for path in sorted({p for dest in [*shown, writable] for p in _parents_under(dest, hidden)},
                           key=lambda p: len(p.parts)):
            args += ["--perms", "0755", "--dir", str(path)]
        for path in shown:
            args += ["--ro-bind", str(path), str(path)]
        hosts = writable / ".hosts"  # loopback names only: a lookup never waits on a network there is none of
        hosts.write_text(_HOSTS)
        args += ["--ro-bind", str(hosts), "/etc/hosts", "--hostname", HOSTNAME]
        args += ["--bind", str(writable), str(writable), "--chdir", str(writable)]
        if self.drop_privileges:
            args += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            args[1:1] = ["--unshare-user"]
            args += ["--cap-drop", "ALL"]
        return args + command

    def own(self, path: Path):
        """Make a directory the grader created writable for the ranks."""
        if self.drop_privileges:
            os.chown(path, self.uid, self.uid)


def gpu_device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """NVIDIA's device nodes (each GPU, the control and memory-manager nodes, the capabilities):
    bubblewrap's fresh /dev has none of them, and without them CUDA finds no GPU."""
    return sorted(dev.glob("nvidia*"))


def _kept_environment() -> list[str]:
    """The grader's environment variables that the ranks may see: how to run, never secrets."""
    kept = []
    for name, value in os.environ.items():
        if name in _KEPT or name.startswith(_KEPT_PREFIXES):
            kept += ["--setenv", name, value]
    return kept


def _hidden(extra: list[Path]) -> list[Path]:
    home = Path(os.path.expanduser("~"))
    paths = {Path(p) for p in HIDDEN} | {home} | {Path(p).resolve() for p in extra}
    paths.add(Path(os.environ.get("TMPDIR", "/tmp")).resolve())
    kept = [p for p in paths if p.is_dir() and p not in _SYSTEM and not p.is_symlink()]
    return sorted(kept, key=lambda p: len(p.parts))


def _shown() -> list[Path]:
    """What the rank host must read: the interpreter, its libraries, the two packages it imports.

    Nothing else on sys.path: `python -m` puts the working directory there, which may be the
    course itself.
    """
    import importlib.util

    prefixes = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}
    packages = [Path(importlib.util.find_spec(name).origin).parent for name in ("autograder", "ddpcourse")]
    paths = {*prefixes, Path(sys.executable).resolve().parent, *packages}
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path and path.is_dir() and any(path == p or p in path.parents for p in prefixes):
            paths.add(path)
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
        return None, "setpriv (util-linux) is needed to run the ranks as an unprivileged user"
    return Sandbox(bwrap, drop_privileges=root), ""
