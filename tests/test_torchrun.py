"""The script solutions also run under the real torchrun, not only under the grader's launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from conftest import SUBMISSIONS
from ddpcourse import TinyNet


# PyTorch 2.13's gloo teardown can abort a rank after its work is done ("terminate called without an
# active exception", SIGABRT) when the DDP model is freed after destroy_process_group, as it is when
# main() returns. The grader's own launcher avoids the race (ranks/trace.py); real torchrun does not, so
# a run that fails with exactly that abort is tried again, at most twice.
TEARDOWN_ABORT = "terminate called without an active exception"


@pytest.mark.parametrize("name", ["correct_tutorial", "correct_nanogpt_style"])
def test_script_solution_under_torchrun(name, tmp_path, no_leftover_processes):
    script = SUBMISSIONS / "ex2_3" / f"{name}.py"
    for attempt in range(3):
        logs = tmp_path / f"logs{attempt}"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   "--log-dir", str(logs), str(script)]
        out = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=180,
                             env={**__import__("os").environ, "OMP_NUM_THREADS": "1"})
        if out.returncode == 0 or TEARDOWN_ABORT not in out.stderr:
            break
    assert out.returncode == 0, out.stderr[-3000:]
    state = torch.load(tmp_path / "checkpoint.pt")
    TinyNet().load_state_dict(state, strict=True)
