"""The notebook front end: the `%%exercise` magic and `check`, in a real kernel and without one."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from autograder import exercises, notebook
from autograder.server import kernel_prefix
from autograder.report import CheckResult, Report
from conftest import alive, descendants

ROOT = Path(__file__).resolve().parent.parent
WRONG_2_3 = ROOT / "tests" / "submissions" / "ex2_3" / "wrong_mean_of_accuracies.py"
SCRIPT_2_2 = ROOT / "tests" / "submissions" / "ex2_2" / "correct_tutorial.py"

CELLS = {
    "setup": "%load_ext autograder\nfrom autograder.notebook import check, progress",
    "check_too_early": 'check("2.3")',
    "exercise": "%%exercise 2.3\n" + WRONG_2_3.read_text(),
    "check": 'check("2.3")',
    "unknown": "%%exercise 9.9\nx = 1",
    "script": "%%exercise 2.2\n" + SCRIPT_2_2.read_text(),
    "namespace": 'print(evaluate.__name__, "main" in globals())',
    "ring": "%%exercise 1.2\n" + (ROOT / "tests" / "submissions" / "ex1_2" / "wrong_gather_to_rank0.py").read_text(),
    "predict": "%%exercise 1.5\n" + (ROOT / "tests" / "submissions" / "ex1_5" / "correct_counted.py").read_text(),
    "check_predictions": 'check("1.5")',
    "progress": "progress()",
}


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The notebook above, run once in a kernel: cell name -> its outputs."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in CELLS.values()]
    workdir = tmp_path_factory.mktemp("nb")
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
    return {"folder": workdir, **{name: cell.outputs for name, cell in zip(CELLS, nb.cells)}}


def result_of(outputs):
    results = [o for o in outputs if o.output_type == "execute_result"]
    assert len(results) == 1, outputs
    return results[0].data


def stream(outputs, name):
    return "".join(o.text for o in outputs if o.output_type == "stream" and o.name == name)


def test_check_cell_writes_nothing_to_stderr(executed):
    for name in ("check_too_early", "check"):
        assert not stream(executed[name], "stderr")
        assert not [o for o in executed[name] if o.output_type == "error"]


def test_check_cell_value_is_the_partial_score(executed):
    data = result_of(executed["check"])
    score = float(data["text/plain"])  # what nbgrader reads as partial credit
    assert 0 < score < exercises.get("2.3").points


def test_check_cell_html_names_the_failing_check(executed):
    page = result_of(executed["check"])["text/html"]
    assert "accuracy equals the single-process accuracy" in page
    assert "failed" in page


def test_check_before_the_exercise_cell_says_so(executed):
    data = result_of(executed["check_too_early"])
    assert float(data["text/plain"]) == 0
    assert "run the exercise cell first" in data["text/html"]


def test_checking_1_5_runs_the_students_own_1_2_cell_as_last_run_in_the_kernel(executed):
    data = result_of(executed["check_predictions"])
    assert float(data["text/plain"]) == exercises.get("1.5").points  # 1.2's mistake costs 1.5 nothing
    assert "data parallelism, your cell of 1.2" in data["text/html"], data["text/html"]
    assert "your code is what differs" in data["text/html"]


def test_every_check_is_noted_beside_the_notebook_and_progress_shows_the_course(executed):
    from autograder import progress

    kept = progress.load(executed["folder"])
    score = float(result_of(executed["check"])["text/plain"])
    assert kept["2.3"]["best"] == kept["2.3"]["last"] == score < kept["2.3"]["max"], kept
    assert kept["2.3"]["checks_run"] == 1 and kept["2.3"]["failing"], kept  # the check before the cell ran is not one
    assert "1.5" in kept and "2.2" not in kept, kept  # a script cell that was never checked
    shown = result_of(executed["progress"])
    assert "<table>" in shown["text/html"] and "next: start exercise 1.0" in shown["text/html"], shown
    assert f"best {score:g}/14" in shown["text/plain"], shown["text/plain"]
    assert not stream(executed["progress"], "stderr")


def test_unknown_exercise_is_one_line(executed):
    out = stream(executed["unknown"], "stdout")
    assert "unknown exercise '9.9'" in out and out.count("\n") == 1
    assert not [o for o in executed["unknown"] if o.output_type == "error"]


def test_function_cell_runs_script_cell_does_not(executed):
    assert "whole script" in stream(executed["script"], "stdout")
    assert stream(executed["namespace"], "stdout").split() == ["evaluate", "False"]


# Without a kernel: the grader's failure paths and the scaling of the score.

@pytest.fixture
def own_grader(monkeypatch):
    """A warm grader for this test alone, stopped after it."""
    monkeypatch.setattr(notebook, "_grader", None)
    yield
    if notebook._grader is not None:
        notebook._grader.stop()


def test_an_exercise_the_grader_does_not_know_scores_zero(own_grader, monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setitem(notebook._cells, "9.9", "x = 1\n")
    outcome = notebook.check("9.9")
    assert repr(outcome) == "0.0"
    assert "unknown exercise" in outcome._repr_html_()
    assert not list(tmp_path.glob(f"{kernel_prefix(os.getpid())}cell-*"))  # the cell's temporary file is gone


def test_a_grader_past_the_limit_is_stopped(own_grader, monkeypatch):
    monkeypatch.setattr(notebook, "GRADE_LIMIT", 0.2)
    monkeypatch.setitem(notebook._cells, "2.3", WRONG_2_3.read_text())
    outcome = notebook.check("2.3")
    assert repr(outcome) == "0.0"
    assert "did not answer within 0.2 s" in outcome._repr_html_()
    assert notebook._grader.proc is None  # stopped, with its ranks; the next check starts a new one
    assert notebook._grader.root is None  # and its work directory, with the student's code, is gone
    assert not list(Path(tempfile.gettempdir()).glob(f"autograder-kernel-{os.getpid()}-*"))


def test_the_stop_button_is_one_line_and_the_next_grader_is_already_starting(own_grader, monkeypatch):
    monkeypatch.setitem(notebook._cells, "2.3", WRONG_2_3.read_text())
    grader = notebook._warm_grader()
    monkeypatch.setattr(grader, "_read_line", lambda limit: (_ for _ in ()).throw(KeyboardInterrupt()))
    outcome = notebook.check("2.3")
    assert repr(outcome) == "0.0" and "stopped with the stop button" in outcome._repr_html_()
    assert "Traceback" not in outcome._repr_html_()
    assert grader.proc is not None and grader.proc.poll() is None  # a fresh server, started at once


def _report(*checks):
    return Report("2.3", "t", "gloo", [1, 2], [CheckResult(*c) for c in checks])


def test_skipped_checks_do_not_cost_points():
    outcome = notebook.CheckOutcome("2.3", _report(("a", "passed", 2, 2), ("gpu", "skipped", 0, 1)))
    assert repr(outcome) == "3.0"


def test_partial_score_is_scaled_to_the_exercise_points():
    outcome = notebook.CheckOutcome(
        "2.3", _report(("a", "passed", 1, 1), ("b", "failed", 0, 2), ("gpu", "skipped", 0, 1)))
    assert repr(outcome) == "1.33"


def test_one_score_everywhere_rounded_to_two_decimals():
    report = _report(("a", "passed", 1, 1), ("b", "failed", 0, 2), ("gpu", "skipped", 0, 1))
    assert report.to_dict()["score"] == 1.33 and report.to_dict()["max_score"] == 4
    assert "1.33/4 points" in report.to_text() and "1 check(s) worth 1 point(s) need a GPU per rank and were skipped here" in report.headline()
    assert "1.33/4 points" in notebook.CheckOutcome("2.3", report)._repr_html_()


KERNEL = """
import json, sys, time
from autograder.server import WarmGrader
grader = WarmGrader()
grader.ask({"exercise": "9.9", "path": sys.argv[1]}, 120)  # starts the server
print(grader.root, grader.proc.pid, flush=True)
grader.proc.stdin.write((json.dumps({"exercise": "2.3", "path": sys.argv[1]}) + "\\n").encode())
grader.proc.stdin.flush()  # a grading in flight, whose ranks sleep
time.sleep(600)
"""


def described(pids) -> list[str]:
    """Each process as `pid state: command line`, and where its main thread waits: what a failure must say."""
    found = []
    for pid in sorted(pids):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            command = command_line(pid).replace(b"\0", b" ").decode(errors="replace")[:200]
            found.append(f"{pid} {state} in {wchan}: {command}")
        except OSError:
            found.append(f"{pid} gone")
    return found


def test_a_kernel_killed_mid_check_leaves_no_grader_no_ranks_and_no_files(tmp_path):
    slow = tmp_path / "slow.py"
    slow.write_text(WRONG_2_3.read_text() + "\nimport time\ntime.sleep(60)\n")
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(slow)], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    try:
        root, server = kernel.stdout.readline().split()
        deadline = time.monotonic() + 60
        while len(descendants(int(server))) < 3 and time.monotonic() < deadline:  # its host, ranks
            time.sleep(0.2)
        grading = {int(server)} | descendants(int(server))
        assert len(grading) >= 4, "the grading never started its ranks"
        kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 15
        while (alive(grading) or Path(root).exists()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert alive(grading) == set(), f"the grader or its ranks outlived the kernel: {described(alive(grading))}"
        assert not Path(root).exists() and not Path(f"{root}.log").exists()
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()


def test_the_grader_is_readied_before_any_check_and_lesson_3s_own_view_once_the_student_reaches_it(tmp_path):
    from jupyter_client.manager import start_new_kernel

    def hosts_started(count: int) -> bool:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            running = [command_line(pid) for pid in descendants(kernel.provisioner.pid)]
            hosts = [c for c in running if b"ranks.host" in c and b"bwrap" not in c.split(b"\0")[0]]  # not its sandbox
            if any(b"autograder\0serve" in c for c in running) and len(hosts) == count:
                return True
            time.sleep(0.2)
        return False

    kernel, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))
    try:
        client.execute("%load_ext autograder")
        assert client.get_shell_msg(timeout=120)["content"]["status"] == "ok"
        assert hosts_started(1), "no grader and rank host were started for the kernel"
        client.execute("%%exercise 3.0\nANSWERS = {}")  # the first exercise cell of lesson 3
        assert client.get_shell_msg(timeout=120)["content"]["status"] == "ok"
        assert hosts_started(2), "3.1's host (a view without the course's SyncBN) was not started in lesson 3"
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)


def command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # ended meanwhile
        return b""


def settled(pid: int, quiet: float = 2.0) -> set[int]:
    """The processes under `pid`, once none has come or gone for `quiet` seconds."""
    seen, since = descendants(pid), time.monotonic()
    while time.monotonic() - since < quiet:
        time.sleep(0.2)
        now = descendants(pid)
        if now != seen:
            seen, since = now, time.monotonic()
    return seen


def errors_shown(client, msg_id: str) -> list[str]:
    """The errors the cell of request `msg_id` showed, read until the kernel went idle after it."""
    shown = []
    while True:
        msg = client.get_iopub_msg(timeout=60)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "error":
            shown.append(msg["content"]["ename"])
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return shown


def check_in_flight(tmp_path):
    """A kernel in the middle of a check whose ranks sleep: (kernel, client, the check's request id,
    the grading's processes). The kernel and its grader use the test's own temporary directory."""
    from jupyter_client.manager import start_new_kernel

    kernel, client = start_new_kernel(kernel_name="python3", cwd=str(tmp_path))

    def run(code: str) -> dict:
        client.execute(code)
        return client.get_shell_msg(timeout=120)["content"]

    assert run("%load_ext autograder\nfrom autograder.notebook import check")["status"] == "ok"
    sleeps_in_ranks = "\nimport os, time\nif 'AUTOGRADER_BACKEND' in os.environ:\n    time.sleep(60)\n"
    assert run("%%exercise 2.3\n" + WRONG_2_3.read_text() + sleeps_in_ranks)["status"] == "ok"
    ready = settled(os.getpid())  # the kernel, and the grader that loading the extension started
    checking = client.execute("check('2.3')")
    deadline = time.monotonic() + 60
    while not descendants(os.getpid()) - ready and time.monotonic() < deadline:  # the ranks
        time.sleep(0.2)
    assert descendants(os.getpid()) - ready, "the check never started its ranks"
    return kernel, client, checking, descendants(os.getpid()) - {kernel.provisioner.pid}


def nothing_left(grading: set[int], tmp: Path, of: set[Path] | None = None):
    """Neither the grading's processes nor its files (``of``: those, else every grader file) are left."""
    deadline = time.monotonic() + 15
    while alive(grading) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive(grading) == set(), "the grader or its ranks outlived the check"
    deadline = time.monotonic() + 5
    while _left(tmp, of) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _left(tmp, of)
    assert not left, left  # no code, traces or log of this kernel


def _left(tmp: Path, of: set[Path] | None) -> list[Path]:
    return [p for p in tmp.glob("autograder-*") if of is None or p in of]


def test_a_check_interrupted_with_the_stop_button_says_so_in_one_line_and_leaves_nothing_behind(tmp_path, private_tmp):
    kernel, client, checking, grading = check_in_flight(tmp_path)
    try:
        files = set(private_tmp.glob("autograder-*"))  # the grading's: a fresh grader starts at once beside them
        kernel.interrupt_kernel()
        client.get_shell_msg(timeout=60)
        assert errors_shown(client, checking) == []  # no traceback through the grader: one line
        nothing_left(grading, private_tmp, of=files)
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)


def test_a_kernel_killed_mid_check_leaves_neither_grader_nor_the_cells_file(tmp_path, private_tmp):
    kernel, client, _, grading = check_in_flight(tmp_path)
    try:
        os.kill(kernel.provisioner.pid, signal.SIGKILL)  # as the kernel's death by memory, or a crash
        nothing_left(grading, private_tmp)
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)


WATCHED_SERVER = """
import sys
import autograder.server as server
server._prctl = lambda *args: None  # no death signal at all: as if it went to a thread other than the main one
sys.exit(server.serve(server.new_root()))
"""
PARENT_OF_WATCHED = """
import json, subprocess, sys, time
server = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          start_new_session=True)
print(server.pid, flush=True)
server.stdin.write((json.dumps({"exercise": "2.3", "path": sys.argv[2]}) + "\\n").encode())
server.stdin.flush()
time.sleep(600)
"""


def test_a_kernel_that_dies_while_its_grader_waits_for_a_starting_host_takes_the_grader_with_it(tmp_path):
    """The kernel's death signal may be taken by any thread of the grader (torch starts several), and Python runs
    the handler only once the main thread runs Python again: here it waits in select() for a rank host that
    never says it is ready. The grader must end anyway, in about a second, and leave nothing running."""
    kernel = subprocess.Popen([sys.executable, "-c", PARENT_OF_WATCHED, WATCHED_SERVER,
                               str(WRONG_2_3)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    grading = set()
    try:
        server = int(kernel.stdout.readline())
        deadline, host = time.monotonic() + 60, None
        while host is None and time.monotonic() < deadline:
            host = next((p for p in descendants(server) if b"ranks.host" in command_line(p)
                         and b"bwrap" not in command_line(p).split(b"\0")[0]), None)
            time.sleep(0.01)
        assert host is not None, "the grader never started a rank host"
        os.kill(host, signal.SIGSTOP)  # it never gets ready: the grader waits for it
        time.sleep(0.5)
        grading = {server} | descendants(server)
        kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 10
        while alive(grading) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(grading) == set(), f"outlived the kernel: {described(alive(grading))}"
    finally:
        if kernel.poll() is None:
            kernel.kill()
            kernel.wait()
        for pid in alive(grading):  # a failure leaves nothing behind either
            os.kill(pid, signal.SIGKILL)
