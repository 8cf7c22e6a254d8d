"""Choose which build of torch scripts/setup.sh installs, and say why.

    .venv/bin/python scripts/choose_torch.py

prints pip's arguments for installing torch on stdout, one a line, and one line on stderr
saying what was chosen and why. It never touches the network, so it cannot hang on an index
it cannot reach: it looks at `nvidia-smi` and at the sources pip is configured with.

The first rule that applies wins:

1. TORCH_INDEX_URL is set: torch from that index (`--index-url`), whatever the machine.
2. TORCH_BUILD=cpu, cuda or default (auto, the default, goes on to the next rules).
3. An NVIDIA GPU (`nvidia-smi -L` lists one): the CUDA build, which is the default build on PyPI.
4. pip's configuration already offers a CPU wheel of this release in a local folder or a
   file:// index (a lab mirror, a wheelhouse): that wheel.
5. Linux without a GPU: the CPU build from PyTorch's CPU index, a few hundred MB instead of
   several GB of CUDA libraries.
6. Elsewhere (macOS, Windows): PyPI's default build, which is CPU-only there.

TORCH_VERSION picks the release (default: the one the course is tested with).
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse
from urllib.request import url2pathname

TESTED_VERSION = "2.13.0"  # environment.yml pins the same release
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
BUILDS = ("auto", "cpu", "cuda", "default")


@dataclass
class Choice:
    pip_args: list[str]
    reason: str


def choose(env: dict[str, str] | None = None) -> Choice:
    env = os.environ if env is None else env
    version = env.get("TORCH_VERSION") or TESTED_VERSION
    build = (env.get("TORCH_BUILD") or "auto").lower()
    index = env.get("TORCH_INDEX_URL")
    if build not in BUILDS:
        raise ValueError(f"TORCH_BUILD={env['TORCH_BUILD']!r}: use one of {', '.join(BUILDS)}")
    if index:
        return Choice(["--index-url", index, f"torch=={version}"], f"torch {version} from {index} (TORCH_INDEX_URL)")
    if build == "default":
        return Choice([f"torch=={version}"], f"torch {version}, the build pip picks with its own configuration "
                                             "(TORCH_BUILD=default)")
    gpu = nvidia_gpu() if build == "auto" else ""
    local = local_cpu_wheel(version)
    if build == "cuda" or gpu:
        why = f"nvidia-smi lists {gpu}" if gpu else "TORCH_BUILD=cuda"
        # `===` matches the version string exactly, so that a local 2.13.0+cpu wheel (which `==` also
        # matches, and pip would prefer as the higher version) is not taken instead of PyPI's CUDA build.
        spec = f"torch==={version}" if local else f"torch=={version}"
        return Choice([spec], f"torch {version}, the CUDA build, from PyPI ({why})")
    why = "TORCH_BUILD=cpu" if build == "cpu" else f"no NVIDIA GPU: {no_gpu_detail()}"
    if local:
        label = f"{version.split('+')[0]}+{local.local_label}"
        return Choice([f"torch=={label}"], f"torch {label}, the CPU build, from {local.filename} in {local.where}, "
                                           f"a source pip is configured with ({why})")
    if platform.system() != "Linux":
        return Choice([f"torch=={version}"], f"torch {version}, the CPU build on {platform.system()}, from PyPI ({why})")
    spec = f"torch=={version}" if "+" in version else f"torch=={version}+cpu"
    return Choice(["--index-url", CPU_INDEX, spec],
                  f"torch {version}, the CPU build, from PyTorch's CPU index {CPU_INDEX} ({why}; "
                  "TORCH_BUILD=cuda installs the CUDA build)")


def nvidia_gpu() -> str:
    """The first GPU `nvidia-smi -L` lists ('' when there is none, or no working driver)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    gpus = [line.split(":", 1)[1].split("(UUID")[0].strip() for line in out.stdout.splitlines()
            if out.returncode == 0 and line.startswith("GPU ") and ":" in line]
    return gpus[0] if gpus else ""


def no_gpu_detail() -> str:
    return "nvidia-smi lists none" if shutil.which("nvidia-smi") else "nvidia-smi not found"


@dataclass
class LocalWheel:
    filename: str
    where: str  # the folder or index that offers it

    @property
    def local_label(self) -> str:
        return self.filename.split("-")[1].split("+", 1)[1]


def local_cpu_wheel(version: str) -> LocalWheel | None:
    """A CPU wheel of torch `version` for this Python, offered by a local source pip is configured with."""
    wanted = re.compile(rf"torch-{re.escape(version.split('+')[0])}\+cpu[^-]*-.*\.whl$")
    for kind, location in pip_sources():
        path = local_path(location)
        if path is None:
            continue
        if kind == "index":  # a PEP 503 index: its page for torch
            path = path / "torch"
        for name in wheel_names(path):
            if wanted.match(name) and compatible(name):
                return LocalWheel(name, location)
    return None


def pip_sources() -> list[tuple[str, str]]:
    """('find-links' or 'index', location) for each source in pip's configuration, files and PIP_* variables."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    sources = []
    for line in out.splitlines():  # e.g. global.find-links='/opt/wheels' or :env:.extra-index-url='a b'
        key, _, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        kind = {"find-links": "find-links", "index-url": "index", "extra-index-url": "index"}.get(option)
        if kind:
            sources += [(kind, item) for item in value.strip("'\"").split()]
    return sources


def local_path(location: str) -> Path | None:
    url = urlparse(location)
    if url.scheme == "file":
        return Path(url2pathname(url.path))
    if url.scheme == "" or len(url.scheme) == 1:  # a path (or a Windows drive letter)
        return Path(location)
    return None  # a remote index: not looked at, so that this never waits on the network


def wheel_names(path: Path) -> list[str]:
    """Wheel file names in a folder, and in the links of its index.html (or of an HTML file itself)."""
    pages, names = [], []
    if path.is_dir():
        names += [p.name for p in path.iterdir() if p.suffix == ".whl"]
        pages += [p for p in (path / "index.html",) if p.is_file()]
    elif path.is_file():
        pages.append(path)
    for page in pages:
        for href in re.findall(r"""href=["']([^"']+)["']""", page.read_text(errors="replace")):
            names.append(unquote(href.split("#")[0].rsplit("/", 1)[-1]))
    return names


def compatible(wheel: str) -> bool:
    """Whether a wheel's tags fit this Python and machine (pip makes the final check when installing)."""
    python_tags, _abi, platform_tags = wheel[: -len(".whl")].split("-")[-3:]
    if f"cp{sys.version_info.major}{sys.version_info.minor}" not in python_tags.split("."):
        return False
    machine = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    system = platform.system()
    for tag in platform_tags.split("."):
        tag_machine = tag.replace("amd64", "x86_64").replace("arm64", "aarch64")
        if system == "Linux" and tag.startswith(("manylinux", "linux")) and tag_machine.endswith(machine):
            return True
        if system == "Darwin" and tag.startswith("macosx") and (tag_machine.endswith(machine) or "universal" in tag):
            return True
        if system == "Windows" and tag.startswith("win") and tag_machine.endswith(machine):
            return True
    return False


def main() -> int:
    try:
        choice = choose()
    except ValueError as exc:
        print(f"choose_torch: {exc}", file=sys.stderr)
        return 2
    print("\n".join(choice.pip_args))
    print(choice.reason, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
