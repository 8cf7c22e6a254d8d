"""The set-up: which torch build scripts/setup.sh installs, bwrap, JupyterLab for students,
and what `python -m autograder` says to a Python without torch.

The torch choice is tested on made-up machines: a fake `nvidia-smi` on PATH, a fake local
wheelhouse, pip's configuration files off. Nothing here touches the network.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT

CHOOSE = ROOT / "scripts" / "choose_torch.py"
SETUP = ROOT / "scripts" / "setup.sh"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
LINUX = pytest.mark.skipif(platform.system() != "Linux", reason="the CPU index rule is for Linux")


def fake_tool(folder: Path, name: str, script: str) -> None:
    folder.mkdir(exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script + "\n")
    path.chmod(0o755)


def choose(tmp_path: Path, gpu: str | None = None, wheels: list[str] = (), **env: str):
    """Run choose_torch.py on a made-up machine: (pip arguments, the line saying why).

    gpu: what the fake `nvidia-smi -L` prints (None: no nvidia-smi at all); wheels: file names
    in a local folder that pip is configured with, as PIP_FIND_LINKS."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if gpu is not None:
        fake_tool(bin_dir, "nvidia-smi", f"printf '%s\\n' '{gpu}'" if gpu else "echo 'NVIDIA-SMI has failed'; exit 9")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "TORCH_"))}
    base.update(PATH=str(bin_dir), PIP_CONFIG_FILE=os.devnull)  # no pip.conf, no real nvidia-smi
    if wheels:
        wheelhouse = tmp_path / "wheels"
        wheelhouse.mkdir()
        for name in wheels:
            (wheelhouse / name).write_bytes(b"")
        base["PIP_FIND_LINKS"] = str(wheelhouse)
    done = subprocess.run([sys.executable, str(CHOOSE)], env={**base, **env}, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, f"one line saying why, not:\n{done.stderr}"
    return done.stdout.split(), done.stderr.strip()


def cpu_wheel(python: str = PY, version: str = "2.13.0") -> str:
    machine = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    return f"torch-{version}+cpu-{python}-{python}-manylinux_2_28_{machine}.whl"


H200 = "GPU 0: NVIDIA H200 (UUID: GPU-0d1c2b3a-0000-1111-2222-333344445555)"


@LINUX
def test_no_gpu_takes_the_cpu_build_from_pytorchs_cpu_index(tmp_path):
    args, why = choose(tmp_path)
    assert args == ["--index-url", CPU_INDEX, "torch==2.13.0+cpu"]
    assert "no NVIDIA GPU" in why and "CPU build" in why


@LINUX
def test_nvidia_smi_without_a_working_driver_is_no_gpu(tmp_path):
    args, why = choose(tmp_path, gpu="")
    assert args == ["--index-url", CPU_INDEX, "torch==2.13.0+cpu"]
    assert "nvidia-smi lists none" in why


def test_a_gpu_takes_the_cuda_build_from_pypi(tmp_path):
    args, why = choose(tmp_path, gpu=H200)
    assert args == ["torch==2.13.0"]
    assert "CUDA build" in why and "NVIDIA H200" in why


def test_a_local_cpu_wheel_is_used_when_pip_is_configured_with_it(tmp_path):
    args, why = choose(tmp_path, wheels=[cpu_wheel()])
    assert args == ["torch==2.13.0+cpu"]
    assert cpu_wheel() in why


def test_a_local_cpu_wheel_in_a_file_index_is_used(tmp_path):
    page = tmp_path / "simple" / "torch" / "index.html"
    page.parent.mkdir(parents=True)
    href = cpu_wheel().replace("+", "%2B")
    page.write_text(f'<html><body><a href="../../files/{href}#sha256=00">{cpu_wheel()}</a></body></html>')
    args, why = choose(tmp_path, PIP_EXTRA_INDEX_URL=(tmp_path / "simple").as_uri())
    assert args == ["torch==2.13.0+cpu"]


@LINUX
def test_a_local_wheel_for_another_python_or_release_is_not_used(tmp_path):
    args, _ = choose(tmp_path, wheels=[cpu_wheel(python="cp39"), cpu_wheel(version="2.12.0")])
    assert args == ["--index-url", CPU_INDEX, "torch==2.13.0+cpu"]


def test_a_gpu_with_a_local_cpu_wheel_still_asks_for_the_cuda_build(tmp_path):
    args, _ = choose(tmp_path, gpu=H200, wheels=[cpu_wheel()])
    assert args == ["torch===2.13.0"]  # exactly 2.13.0: `==` would also take 2.13.0+cpu


@LINUX
def test_torch_build_cpu_overrides_a_gpu(tmp_path):
    args, why = choose(tmp_path, gpu=H200, TORCH_BUILD="cpu")
    assert args == ["--index-url", CPU_INDEX, "torch==2.13.0+cpu"]
    assert "TORCH_BUILD=cpu" in why


def test_torch_build_cuda_without_a_gpu(tmp_path):
    args, why = choose(tmp_path, TORCH_BUILD="cuda")
    assert args == ["torch==2.13.0"]
    assert "TORCH_BUILD=cuda" in why


def test_torch_build_default_leaves_the_choice_to_pip(tmp_path):
    args, _ = choose(tmp_path, gpu=H200, wheels=[cpu_wheel()], TORCH_BUILD="default")
    assert args == ["torch==2.13.0"]


def test_torch_index_url_and_version_override_everything(tmp_path):
    args, why = choose(tmp_path, gpu=H200, TORCH_INDEX_URL="https://download.pytorch.org/whl/cu126",
                       TORCH_VERSION="2.12.1")
    assert args == ["--index-url", "https://download.pytorch.org/whl/cu126", "torch==2.12.1"]
    assert "TORCH_INDEX_URL" in why


def test_an_unknown_torch_build_is_refused_in_one_line(tmp_path):
    env = {**os.environ, "TORCH_BUILD": "rocm"}
    done = subprocess.run([sys.executable, str(CHOOSE)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.strip() == "choose_torch: TORCH_BUILD='rocm': use one of auto, cpu, cuda, default"


def test_environment_yml_pins_the_same_torch():
    tested = re.search(r'^TESTED_VERSION = "([^"]+)"', CHOOSE.read_text(), re.M).group(1)
    assert f"torch=={tested}" in (ROOT / "environment.yml").read_text()


# --- bwrap: installed when it can be, never a reason to fail ------------------------------------


def ensure_bwrap(tmp_path: Path, uid: int, apt: str | None, bwrap: bool = False):
    """Run setup.sh's ensure_bwrap with only fake tools on PATH: (exit status, output, apt-get calls)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "apt-calls"
    fake_tool(bin_dir, "uname", "echo Linux")
    fake_tool(bin_dir, "id", f"echo {uid}")
    if bwrap:
        fake_tool(bin_dir, "bwrap", "exit 0")
    if apt is not None:  # apt: the shell code of the fake apt-get, after it logs its arguments
        fake_tool(bin_dir, "apt-get", f'echo "$*" >> {calls}\n{apt}')
    done = subprocess.run(["/bin/bash", "-c", f"source {SETUP} && ensure_bwrap"], env={"PATH": str(bin_dir)},
                          capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout + done.stderr, calls.read_text().splitlines() if calls.exists() else []


def test_bwrap_present_nothing_to_do(tmp_path):
    assert ensure_bwrap(tmp_path, uid=0, apt="exit 0", bwrap=True) == (0, "", [])


def test_bwrap_installed_with_apt_get_as_root(tmp_path):
    status, out, calls = ensure_bwrap(tmp_path, uid=0, apt="exit 0")
    assert status == 0 and "installing bubblewrap" in out
    assert calls == ["install -y -q bubblewrap"]


def test_bwrap_install_updates_apt_lists_when_needed(tmp_path):
    # the first install fails (no package lists yet), update, then the install works
    updated = tmp_path / "updated"
    status, _, calls = ensure_bwrap(tmp_path, uid=0, apt=f'[ "$1" = update ] && : > {updated}; [ -e {updated} ]')
    assert status == 0
    assert calls == ["install -y -q bubblewrap", "update -q", "install -y -q bubblewrap"]


def test_bwrap_that_cannot_be_installed_is_not_fatal(tmp_path):
    status, out, _ = ensure_bwrap(tmp_path, uid=0, apt="exit 100")
    assert status == 0 and "could not install bubblewrap" in out


def test_bwrap_without_root_says_how_to_install_it(tmp_path):
    status, out, calls = ensure_bwrap(tmp_path, uid=1000, apt="exit 0")
    assert status == 0 and calls == []
    assert len(out.strip().splitlines()) == 1 and "apt-get install bubblewrap" in out


# --- JupyterLab as students get it --------------------------------------------------------------


@pytest.mark.skipif((Path(sys.prefix) / ".instructor-tools-on").exists(),
                    reason="an instructor turned nbgrader's instructor tools on (scripts/instructor.sh)")
def test_students_do_not_see_nbgrader_instructor_tools():
    jupyter = str(Path(sys.executable).with_name("jupyter"))

    def listed(*command: str) -> str:
        done = subprocess.run([jupyter, *command, "list"], capture_output=True, text=True, timeout=120)
        return re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # no colours

    disabled = listed("labextension").split("Disabled extensions:")[-1]
    for plugin in ("formgrader", "course-list", "create-assignment", "validate-assignment"):
        assert f"@jupyter/nbgrader:{plugin}" in disabled
    assert "@jupyter/nbgrader:assignment-list" not in disabled  # the students' own tool
    server = dict(re.findall(r"nbgrader\.server_extensions\.(\w+) (enabled|disabled)", listed("server", "extension")))
    assert server == {"formgrader": "disabled", "course_list": "disabled", "assignment_list": "enabled",
                      "validate_assignment": "disabled"}


# --- python -m autograder with a Python that lacks torch ----------------------------------------


def without_torch(*args: str) -> subprocess.CompletedProcess:
    """`python -m autograder ARGS` with site-packages (and so torch) out of reach, from the clone."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-S", "-m", "autograder", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)


def test_grading_without_torch_says_what_to_run_instead():
    done = without_torch("grade", "2.3", "exercises/02_ddp_basics.ipynb")
    assert done.returncode == 2 and not done.stdout
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"autograder: torch is not installed for {sys.executable}")
    assert ".venv/bin/python -m autograder grade 2.3 exercises/02_ddp_basics.ipynb" in done.stderr


def test_list_and_help_need_no_torch():
    listed = without_torch("list")
    assert listed.returncode == 0 and "2.3" in listed.stdout.split()
    helped = without_torch("--help")
    assert helped.returncode == 0 and "grade one exercise" not in helped.stdout
