"""The script solutions also run under the real torchrun, not only under the grader's launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import SUBMISSIONS
from ddpcourse import TinyNet


@pytest.mark.parametrize("name", ["correct_tutorial", "correct_nanogpt_style"])
def test_script_solution_under_torchrun(name, tmp_path, no_leftover_processes):
    script = SUBMISSIONS / "ex2_3" / f"{name}.py"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "--log-dir", str(tmp_path / "logs"), str(script)]
    out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                         env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    state = torch.load(tmp_path / "checkpoint.pt")
    TinyNet().load_state_dict(state, strict=True)
