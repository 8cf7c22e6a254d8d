"""The grader's side of 4.6's Slurm: what the sandbox's cluster is called, whether this machine can run
it, and the job's `torchrun`.

The cluster itself is started inside the sandbox by the rank host (ranks/slurm.py), with the names
given here: a controller on the sandbox's host name, two nodes on addresses the sandbox gives its
loopback (sandbox.py), and the sandbox's user, whom the grader names in the sandbox's /etc/passwd.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path, PurePosixPath

NODES = {"n1": "10.255.0.1", "n2": "10.255.0.2"}  # the sandbox's two nodes and their addresses
CONTROLLER = "sandbox"  # the sandbox's host name, where slurmctld runs
USER = "student"  # the sandbox's user, as Slurm names it
NAMES = {"nodes": NODES, "controller": CONTROLLER, "user": USER}  # what the rank host is told (ranks/slurm.py)
PROGRAMS = ("munged", "slurmctld", "slurmd", "slurmstepd", "sbatch", "scontrol", "srun", "ip")


def missing() -> str:
    """What this machine lacks to run the sandbox's Slurm, or ""."""
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin", "/sbin", "/bin"])
    absent = [name for name in PROGRAMS if shutil.which(name, path=path) is None]
    return f"{', '.join(absent)} not installed (Debian/Ubuntu: apt-get install slurm-wlm munge iproute2)" if absent else ""


def shims(folder: Path, inside: PurePosixPath, ranks_parent: str, trace: str, args: list[str]) -> str:
    """The job's `torchrun`, `python`, `python3` and `hostname`, written in ``folder``/bin (a code directory of the
    grader's, which the ranks see at ``inside``), and what they need to know; where the job finds them.
    Each runs ranks.slurm's agent_main or python_main, by absolute path, in Python's isolated mode."""
    config = folder / "slurm.json"
    config.write_text(json.dumps({"trace": trace, "args": list(args)}))
    bin_dir = folder / "bin"
    bin_dir.mkdir(mode=0o755)
    for name, function in (("torchrun", "agent_main"), ("python", "python_main"), ("python3", "python_main")):
        boot = (f"import sys; sys.path.insert(0, {json.dumps(ranks_parent)}); from ranks.slurm import {function}; "
                f"{function}(sys.argv[1:], {json.dumps(str(inside / 'slurm.json'))})")
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\nexec {sys.executable} -I -c '{boot}' \"$@\"\n")
        path.chmod(0o755)
    (bin_dir / "hostname").write_text(HOSTNAME)
    (bin_dir / "hostname").chmod(0o755)
    return str(inside / "bin")


# Both nodes are the sandbox, but on a cluster each is a machine of its own name: a job's `hostname` (its batch
# script runs on the first node, as on a cluster) names the node it runs on, and -i its address.
HOSTNAME = """#!/bin/sh
[ -n "$SLURMD_NODENAME" ] || exec /usr/bin/hostname "$@"
case "$1" in
  -i|-I|--ip-address|--all-ip-addresses) getent hosts "$SLURMD_NODENAME" | cut -d ' ' -f 1 ;;
  *) echo "$SLURMD_NODENAME" ;;
esac
"""
