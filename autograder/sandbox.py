"""The sandbox every submission runs in: bubblewrap, when this machine can run it.

What a submission's ranks get (see README, "What a submission can and cannot do"):

- a PID namespace of their own: nothing outside is visible, and nothing they start outlives
  the grading (the namespace dies with its first process);
- a network namespace with only a loopback interface;
- a file system that shows only what they need, read-only: the system's libraries and programs
  (/usr and the links to it), a few files of /etc, the Python installation, and the two packages
  the ranks import, ``ranks`` and ``ddpcourse`` (less any module the exercise must not see). The
  grader's own package (its checks, answer keys and references), the course, the home and
  temporary directories and everything else on the machine are simply not there;
- two writable file systems in memory, capped in size: ``/work``, where the launches write, and
  ``/tmp``; and ``/grading/code``, the grader's directory of the code to run, read-only;
- a minimal /dev, with a /dev/shm of its own (in memory, capped like /tmp), plus the GPU device nodes the machine has (nccl ranks need them; gloo ranks
  are launched with CUDA_VISIBLE_DEVICES empty, so CUDA does not use them);
- an unprivileged user, no capabilities, no new privileges: when the grader runs as root, a
  user id of its own, unused by anyone else, so that the process limit of one submission (a
  fork bomb) cannot starve another graded at the same time;
- none of the grader's environment variables but those that say how to run;
- limits on everything the submission runs, together (limits.py), and per rank (the rank host).

The grader reads the work directory from outside through a descriptor of it (``/proc/<pid>/root/grading/work`` of the
sandbox's first process, opened once the sandbox runs), and never by a path a rank could change.

``probe()`` tries the sandbox once per process and says why it cannot be used, if it cannot.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import os
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from autograder.batch import CONTROLLER as SLURM_CONTROLLER, NODES as SLURM_NODES, USER as SLURM_USER

WORK = "/grading/work"  # inside the sandbox: the launches' directories, a tmpfs
SCRATCH = ("/tmp", "/dev/shm")  # inside the sandbox: tmpfs of its own, emptied after each grading
CODE = "/grading/code"  # inside the sandbox: the code the ranks run, the grader's, read-only
FIRST_UID = 1_000_000  # user ids given to sandboxes: one per rank host, from the grader's pid
_hosts_started = itertools.count()
# Not --unshare-all: as root that adds a user namespace in which root may not enter the sandbox user's directory.
_NAMESPACES = ("--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "passwd", "group", "localtime",
        "alternatives", "host.conf")
_KEPT = {"PATH", "LANG", "LANGUAGE", "TZ", "LD_LIBRARY_PATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE",
         "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", "TERM"}
_KEPT_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "NVPL_", "CUDA_", "NVIDIA_", "NCCL_", "GLOO_", "TORCH_")
HOSTNAME = SLURM_CONTROLLER
# The machine is named (torchrun tells workers MASTER_ADDR by name), and so are the nodes of its own Slurm (4.6).
HOSTS = (f"127.0.0.1 {HOSTNAME} localhost\n::1 localhost\n::ffff:127.0.0.1 localhost\n"
         + "".join(f"{address} {name}\n" for name, address in SLURM_NODES.items()))
SHOWN_PACKAGES = ("ranks", "ddpcourse")  # what the ranks import; the grader's own package is not among them


@dataclass
class Sandbox:
    bwrap: str
    drop_privileges: bool  # the grader runs as root: the ranks run as the user `uid`, with no privileges
    uid: int | None = None
    no_nested_users: bool = False  # this bubblewrap can forbid user namespaces inside (--disable-userns)

    def fresh(self) -> "Sandbox":
        """The sandbox for one more rank host: as root, with a user id no other sandbox has."""
        if not self.drop_privileges:
            return self
        return replace(self, uid=FIRST_UID + (os.getpid() % 4_000_000) * 64 + next(_hosts_started) % 64)

    def wrap(self, command: list[str], *, code: Path, hosts: Path, hidden: tuple[str, ...] = (),
             work_mb: int = 1024, tmp_mb: int = 256, info_fd: int | None = None, accounts: Path | None = None) -> list[str]:
        """``command`` run inside the sandbox; ``code`` (the grader's) shown read-only at CODE, ``hosts`` as
        /etc/hosts; the modules ``hidden`` left out of the packages shown; as root, the sandbox's user named
        in the passwd and group files written in ``accounts``."""
        args = [self.bwrap, *_NAMESPACES, "--die-with-parent", "--new-session"]
        if not self.drop_privileges:
            args += ["--unshare-user", *(["--disable-userns"] if self.no_nested_users else [])]
        # The scratch file systems first: what is shown from under them (a course cloned in /tmp) is
        # mounted on top of them, not hidden by them.
        args += ["--proc", "/proc", "--dev", "/dev"]
        for scratch in SCRATCH:  # /dev/shm: DataLoader's workers
            args += ["--perms", "01777", "--size", str(tmp_mb << 20), "--tmpfs", scratch]
        options = shown(hidden)
        for parent in _parents([o[-1] for o in options if "--symlink" not in o] + [WORK, CODE]):
            args += ["--perms", "0755", "--dir", parent]  # else bubblewrap makes them 0700: root's alone
        for option in options:
            args += option
        for node in gpu_device_nodes():
            args += ["--dev-bind", str(node), str(node)]
        args += ["--size", str(work_mb << 20), "--tmpfs", WORK]  # root's; the grader makes what the ranks write in
        args += ["--ro-bind", str(code), CODE, "--ro-bind", str(hosts), "/etc/hosts", "--hostname", HOSTNAME]
        args += ["--ro-bind", "/sys", "/sys"]  # read-only: Slurm's nodes (4.6) read the machine's CPUs there
        if self.drop_privileges and accounts is not None:
            for name in ("passwd", "group"):
                args += ["--ro-bind", str(self.account_file(accounts, name)), f"/etc/{name}"]
        args += ["--clearenv", *_kept_environment(), "--setenv", "TMPDIR", "/tmp", "--setenv", "HOME", "/tmp"]
        if self.drop_privileges:
            args += ["--setenv", "USER", SLURM_USER, "--setenv", "LOGNAME", SLURM_USER]
        args += ["--chdir", "/"]
        if info_fd is not None:
            args += ["--info-fd", str(info_fd)]
        if self.drop_privileges:
            args += _node_addresses()
            args += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            args += ["--cap-drop", "ALL"]
        return args + command

    def account_file(self, folder: Path, name: str) -> Path:
        """/etc/``name`` with the sandbox's user added (Slurm's daemons run as that user, by name), in ``folder``."""
        path = folder / name
        lines = Path(f"/etc/{name}").read_text().splitlines() if os.path.exists(f"/etc/{name}") else []
        entry = (f"{SLURM_USER}:x:{self.uid}:{self.uid}:student:/tmp:/bin/sh" if name == "passwd"
                 else f"{SLURM_USER}:x:{self.uid}:")
        path.write_text("\n".join([line for line in lines if not line.startswith(f"{SLURM_USER}:")] + [entry]) + "\n")
        return path

    def owner(self) -> int | None:
        """Who must own what the grader makes for the ranks to write in: the sandbox's user, as root."""
        return self.uid if self.drop_privileges else None


def _node_addresses() -> list[str]:
    """Before privileges drop: the addresses of the sandbox's Slurm nodes on its loopback (Slurm ignores
    127.0.0.1 itself when it resolves names); nothing, where there is no `ip` to add them."""
    ip = shutil.which("ip") or next((p for p in ("/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip") if os.path.exists(p)), None)
    if ip is None:
        return []
    added = " && ".join(f"{ip} addr add {address}/32 dev lo" for address in SLURM_NODES.values())
    return ["/bin/sh", "-c", f'{added} 2>/dev/null; exec "$@"', "sh"]


def shown(hidden: tuple[str, ...] = ()) -> list[list[str]]:
    """What the sandbox shows, as bubblewrap's options in order: the system and Python read-only; over
    any of that, an empty directory where the course or the grader's package would show through; then
    the packages the ranks import, less the files of the ``hidden`` modules."""
    options = []
    for path in _SYSTEM:
        if os.path.islink(path):
            options.append(["--symlink", os.readlink(path), path])
        elif os.path.isdir(path):
            options.append(["--ro-bind", path, path])
    options += [["--ro-bind", f"/etc/{name}", f"/etc/{name}"] for name in _ETC if os.path.lexists(f"/etc/{name}")]
    python = _python_paths()
    options += [["--ro-bind", str(p), str(p)] for p in python]
    bound = [Path(p) for p in _SYSTEM if not os.path.islink(p)] + python
    for secret in concealed():
        if any(secret == b or b in secret.parents for b in bound):
            options.append(["--tmpfs", str(secret)])
    for name in SHOWN_PACKAGES:
        options += _package(package_dir(name), [h.split(".")[1:] for h in hidden if h.split(".")[0] == name])
    return options


def mounted_in(scratch: str, hidden: tuple[str, ...] = ()) -> frozenset[str]:
    """The names in a scratch directory (/tmp) under which the sandbox shows something, where the
    course lies under it: the grader empties that directory after each grading, all but these."""
    top = Path(scratch)
    return frozenset(Path(o[-1]).relative_to(top).parts[0] for o in shown(hidden)
                     if top in Path(o[-1]).parents)


def _parents(destinations: list[str]) -> list[str]:
    """The directories above ``destinations`` that none of them is, nor lies in: bubblewrap makes them."""
    places = [Path(d) for d in destinations]
    found = {parent for place in places for parent in place.parents
             if parent != Path("/") and not any(parent == p or p in parent.parents for p in places)}
    return [str(p) for p in sorted(found, key=lambda p: len(p.parts))]


def package_dir(name: str) -> Path:
    """Where a top-level package lies, found without importing it."""
    spec = importlib.util.find_spec(name)
    return Path(spec.submodule_search_locations[0]).resolve()


def concealed() -> list[Path]:
    """What must not show through a directory the sandbox shows: the course, and the grader's package."""
    grader = package_dir("autograder")
    return sorted({grader.parent, grader}, key=lambda p: len(p.parts))


def _package(directory: Path, hidden: list[list[str]]) -> list[list[str]]:
    """A package shown read-only; with modules hidden (their names inside it, as parts), file by file,
    without theirs: neither source, bytecode, nor a subpackage of that name."""
    if not hidden:
        return [["--ro-bind", str(directory), str(directory)]]

    def left_out(path: Path) -> bool:
        for parts in hidden:
            home = directory.joinpath(*parts[:-1])
            if path.parent in (home, home / "__pycache__") and path.name.split(".")[0] == parts[-1]:
                return True
            if home / parts[-1] in path.parents:
                return True
        return False

    files = [p for p in sorted(directory.rglob("*")) if p.is_file() and not p.is_symlink() and not left_out(p)]
    folders = sorted({p.parent for p in files if p.parent != directory}, key=lambda p: len(p.parts))
    return [["--perms", "0755", "--tmpfs", str(directory)], *(["--perms", "0755", "--dir", str(d)] for d in folders),
            *(["--ro-bind", str(p), str(p)] for p in files)]


def _python_paths() -> list[Path]:
    """The interpreter, its standard library and the site-packages the ranks import from."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    paths = {*prefixes, Path(sys.executable).resolve().parent}
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path and path.is_dir() and any(path == p or p in path.parents for p in prefixes):
            paths.add(path)
    paths = {p for p in paths if p.exists() and not any(p == s or Path(s) in p.parents for s in _SYSTEM)}
    return sorted((p for p in paths if not any(o in p.parents for o in paths)), key=lambda p: len(p.parts))


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
    return Sandbox(bwrap, drop_privileges=root, no_nested_users=_offers(bwrap, "--disable-userns")), ""


def _offers(bwrap: str, option: str) -> bool:
    import subprocess

    try:
        return option in subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return False
