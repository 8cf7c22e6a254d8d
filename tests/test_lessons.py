"""Every lesson runs top to bottom on a CPU-only machine, quietly and without leftovers."""

from __future__ import annotations

import subprocess

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT, browser_missing

LESSONS = sorted((ROOT / "lessons").glob("*.ipynb"))


def _untracked() -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True).stdout
    return set(out.splitlines())


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_top_to_bottom(path, no_leftover_processes, request):
    if not browser_missing() and "browser" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("run in JupyterLab by tests/test_browser.py::test_lesson_runs_in_jupyterlab, which checks the same")
    before = _untracked()
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    stderr = [o.text for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    assert not stderr, stderr
    assert _untracked() == before, "the lesson left files in the repository"


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_is_saved_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
