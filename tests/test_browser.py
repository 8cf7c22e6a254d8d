"""A student's session in a real JupyterLab, driven through headless Chromium.

JupyterLab runs from .venv on a loopback port the OS picks, with a token, in a temporary root
holding copies of the lesson and the exercise notebook (the repository's are never touched),
with its own settings, workspace, runtime and temporary directories. The test runs the lesson
top to bottom, then answers exercise 2.3 wrongly and rightly and reads the report each time,
as the student would. Screenshots go to tests/.screenshots/ (git-ignored). At the end JupyterLab
shuts down and every process it started (kernels, the grader, its ranks) must be gone.

    .venv/bin/python -m pytest -m browser        # only the browser tests

Needs the Python package playwright (the test extra) and a Chromium on PATH (Debian: apt-get
install chromium); never `playwright install`. Skipped, saying which is missing, without them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, alive, browser_missing, descendants, edits

pytestmark = pytest.mark.browser

if browser_missing():
    pytest.skip(browser_missing(), allow_module_level=True)
from playwright import sync_api  # noqa: E402

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))))

JUPYTER = Path(sys.executable).with_name("jupyter")
LESSON = "02_ddp_basics.ipynb"
INSTRUCTOR_TOOLS_ON = (Path(sys.prefix) / ".instructor-tools-on").exists()  # scripts/instructor.sh
LESSONS = ("01_parallelism.ipynb", LESSON, "03_syncbn_sharding.ipynb", "04_torchrun.ipynb")
SHOWS_TRACEBACKS = {"04_torchrun.ipynb"}  # it prints a failed worker's report on purpose
SHOTS = ROOT / "tests" / ".screenshots"
SUBMISSIONS = ROOT / "tests" / "submissions" / "ex2_3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base URL, token, root dir) of a JupyterLab serving copies of the notebooks."""
    home = tmp_path_factory.mktemp("lab")
    root = home / "root"
    (root / "lessons").mkdir(parents=True)
    (root / "exercises").mkdir()
    for notebook in LESSONS:
        shutil.copy(ROOT / "lessons" / notebook, root / "lessons")
        shutil.copy(ROOT / "exercises" / notebook, root / "exercises")
    settings = {  # every cell in the page, not only those scrolled into view; no pop-up asking about news
        "notebook-extension/tracker": {"windowingMode": "none"},
        "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }
    for name, values in settings.items():
        path = home / "settings" / "@jupyterlab" / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    for name in ("config", "data", "runtime", "tmp", "workspaces"):
        (home / name).mkdir()
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"), "TMPDIR": str(home / "tmp")}
    port, token = free_port(), secrets.token_hex(16)
    log = (home / "lab.log").open("w")
    server = subprocess.Popen(
        [str(JUPYTER), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}", "--ServerApp.port_retries=0",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI runs as root
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    originals = {path: path.read_bytes() for notebook in LESSONS
                 for path in (ROOT / "lessons" / notebook, ROOT / "exercises" / notebook)}
    try:
        wait_for_server(url, token, server, home / "lab.log")
        yield url, token, root
    finally:
        shut_down(server, url, token)
        log.close()
    assert all(path.read_bytes() == data for path, data in originals.items()), "a repository notebook changed"


def wait_for_server(url: str, token: str, server: subprocess.Popen, log: Path, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"JupyterLab exited with status {server.returncode}:\n{log.read_text()}")
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    pytest.fail(f"JupyterLab did not answer within {limit:g} s:\n{log.read_text()}")


def shut_down(server: subprocess.Popen, url: str, token: str) -> None:
    """Shut JupyterLab down (it stops its kernels), then make sure nothing it started is left."""
    started = descendants(server.pid)  # kernels run in sessions of their own: not in the server's group
    try:
        if server.poll() is None:
            request = urllib.request.Request(f"{url}/api/shutdown", method="POST",
                                             headers={"Authorization": f"token {token}"})
            urllib.request.urlopen(request, timeout=10)
            server.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    deadline = time.monotonic() + 10
    while alive(started) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = alive(started)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes JupyterLab started were still running after it shut down: {sorted(left)}"


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        # --no-sandbox: Chromium's own sandbox refuses to run as root (CI runs as root)
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    SHOTS.mkdir(exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(60_000)
    yield page
    context.close()


def open_notebook(page, lab, path: str):
    url, token, _ = lab
    page.goto(f"{url}/lab/tree/{path}?reset&token={token}")  # reset: no tabs of an earlier test
    page.locator(".jp-Notebook .jp-Cell").first.wait_for()
    wait_idle(page)  # the kernel has started: running a cell before would ask which kernel to use


def wait_idle(page, limit: float = 240_000):
    """Until the status bar says the kernel is idle and no cell waits to run ([*])."""
    page.wait_for_function(
        r"""() => {
            const status = document.querySelector('#jp-main-statusbar');
            const busy = [...document.querySelectorAll('.jp-InputPrompt')].some(p => p.textContent.includes('*'));
            return status && /ipykernel\) \| Idle/.test(status.innerText) && !busy;
        }""", timeout=limit)


def menu(page, top: str, item: str):
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{top}$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(f"^{re.escape(item)}$")).click()


def code_cell(page, first_line: str, wait: float = 60):
    """The code cell whose source starts with `first_line`, once JupyterLab has rendered it."""
    deadline = time.monotonic() + wait
    while True:
        cells = page.locator(".jp-CodeCell")
        for i in range(cells.count()):
            if cells.nth(i).locator(".cm-content").inner_text().startswith(first_line):
                return cells.nth(i)
        if time.monotonic() > deadline:
            raise AssertionError(f"no cell starts with {first_line!r}")
        page.wait_for_timeout(500)  # a notebook just opened renders its cells a little later


def run_cell(page, cell, source: str | None = None):
    """Put `source` in the cell (when given) and run it with Shift+Enter, as a student does."""
    cell.locator(".cm-content").click()
    if source is not None:
        page.keyboard.press("Control+A")
        page.keyboard.press("Delete")
        page.keyboard.insert_text(source)  # pasted, not typed: no auto-indent, no closing brackets
    page.keyboard.press("Shift+Enter")


def report_of(check_cell, exercise: str = "2.3") -> tuple[str, float, float]:
    """The report a check cell shows: its text, the points earned and the points possible."""
    report = check_cell.locator(".autograder-report")
    report.wait_for(timeout=240_000)
    text = report.inner_text()
    match = re.search(rf"Exercise {re.escape(exercise)} \(.*?\): (\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) points", text)
    assert match, f"no 'Exercise {exercise} (...): X/Y points' headline in the report:\n{text}"
    return text, float(match.group(1)), float(match.group(2))


def files_under(root: Path) -> set[Path]:
    return {p.relative_to(root) for p in root.rglob("*") if not any(part.startswith(".") for part in p.parts)}


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_runs_in_jupyterlab(lab, page, lesson):
    """Each lesson, top to bottom, in JupyterLab: tests/test_lessons.py does the same with nbclient
    where there is no browser."""
    before = files_under(lab[2])
    open_notebook(page, lab, f"lessons/{lesson}")
    menu(page, "Run", "Run All Cells")
    page.wait_for_timeout(500)
    wait_idle(page)
    page.locator(".jp-CodeCell").first.scroll_into_view_if_needed()
    page.screenshot(path=SHOTS / f"lesson_{lesson.split('_')[0]}.png")
    prompts = page.locator(".jp-CodeCell .jp-InputPrompt").all_inner_texts()
    assert prompts and all(re.search(r"\[\d+\]", p) for p in prompts), f"cells not run: {prompts}"
    # an exception, like anything written to stderr, shows with the stderr mime type
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    assert errors.count() == 0, errors.all_inner_texts()
    if lesson not in SHOWS_TRACEBACKS:
        assert not [t for t in page.locator(".jp-OutputArea-output").all_inner_texts() if "Traceback" in t]
    assert files_under(lab[2]) == before, "the lesson left files beside the notebooks"


def exercise_2_3(page, lab):
    """Lesson 2's problem set open with the grader loaded: exercise 2.3's cell and its check cell."""
    open_notebook(page, lab, f"exercises/{LESSON}")
    run_cell(page, code_cell(page, "%load_ext autograder"))
    wait_idle(page)
    return code_cell(page, "%%exercise 2.3"), page.locator(".jp-CodeCell", has=page.locator(".cm-content",
                                                                                          has_text='check("2.3"'))


def test_exercise_report_in_jupyterlab(lab, page):
    exercise, check = exercise_2_3(page, lab)
    if not INSTRUCTOR_TOOLS_ON:  # the check cells are the students' report; Validate is an instructor's tool
        assert page.locator(".jp-NotebookPanel-toolbar", has_text="Validate").count() == 0

    wrong = (SUBMISSIONS / "wrong_mean_of_accuracies.py").read_text()
    run_cell(page, exercise, f"%%exercise 2.3\n{wrong}")
    run_cell(page, check)
    text, earned, possible = report_of(check)
    check.screenshot(path=SHOTS / "exercise_2_3_wrong.png")
    assert earned < possible, text
    failed = check.locator("tr", has_text="accuracy equals the single-process accuracy")
    assert "failed" in failed.inner_text() and "Hint" in failed.inner_text(), text
    # the idea's lesson section is a link that opens the lesson in JupyterLab, beside the exercises
    failed.locator("a[href*='lessons/02_ddp_basics.ipynb'][href*='#']").click()
    lesson_tab = page.locator(".lm-TabBar-tab[title*='lessons/02_ddp_basics.ipynb']")
    lesson_tab.wait_for(timeout=60_000)
    wait_idle(page)
    page.locator(".lm-TabBar-tab[title*='exercises/02_ddp_basics.ipynb']").click()

    # a new cell under the check: hint("2.3"), run three times, gives the idea, where to look, then how
    check.locator(".cm-content").click()
    for key in ("Escape", "b", "Enter"):
        page.keyboard.press(key)
    page.keyboard.insert_text('hint("2.3")')
    asked = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text='hint("2.3")'))
    for step, title in enumerate(("the idea", "where to look", "how to fix it"), start=1):
        run_cell(page, asked)
        page.wait_for_function("([cell, said]) => cell.innerText.includes(said)",
                               arg=[asked.element_handle(), f"hint {step} of 3"], timeout=60_000)
        given = asked.locator(".autograder-hint")
        assert f"hint {step} of 3" in given.inner_text() and title in given.inner_text(), given.inner_text()
        given.screenshot(path=SHOTS / f"hint_{step}.png")

    right = (SUBMISSIONS / "correct_blocks.py").read_text()
    run_cell(page, exercise, f"%%exercise 2.3\n{right}")
    run_cell(page, check)
    page.wait_for_function("cell => !cell.innerText.includes('Hint')", arg=check.element_handle(), timeout=240_000)
    text, earned, possible = report_of(check)
    check.screenshot(path=SHOTS / "exercise_2_3_right.png")
    assert earned == possible, text
    assert "Hint" not in text

    # a new cell under the check: progress() shows both checks as the best one, and what to do next
    check.locator(".cm-content").click()
    for key in ("Escape", "b", "Enter"):
        page.keyboard.press(key)
    page.keyboard.insert_text("progress()")
    page.keyboard.press("Shift+Enter")
    shown = page.locator(".autograder-progress")
    shown.wait_for(timeout=60_000)
    row = shown.locator("tr", has_text="2.3")
    cells = row.locator("td")
    assert f"{possible:g}/{possible:g}" in row.inner_text() and cells.nth(5).inner_text() == "2", row.inner_text()
    assert cells.last.inner_text() == "3", row.inner_text()  # the hints taken
    assert "next: start exercise 1.0" in shown.inner_text()
    shown.screenshot(path=SHOTS / "progress.png")


def test_the_stop_button_stops_a_check_and_leaves_one_line(lab, page):
    exercise, check = exercise_2_3(page, lab)
    endless = "import time\n\n\ndef evaluate(model, dataset, batch_size=16):\n    while True:\n        time.sleep(0.05)\n"
    run_cell(page, exercise, f"%%exercise 2.3\n{endless}")
    wait_idle(page)
    run_cell(page, check)
    page.wait_for_timeout(3000)  # the ranks are running the endless loop
    menu(page, "Kernel", "Interrupt Kernel")
    page.wait_for_function("cell => cell.innerText.includes('stopped with the stop button')",
                           arg=check.element_handle(), timeout=60_000)
    wait_idle(page)
    said = check.locator(".jp-OutputArea-output").all_inner_texts()
    check.screenshot(path=SHOTS / "stopped.png")
    assert len(said) == 1 and len(said[0].strip().splitlines()) == 1, said
    assert "Traceback" not in said[0] and "KeyboardInterrupt" not in said[0], said

    right = (SUBMISSIONS / "correct_blocks.py").read_text()  # and the next check runs as usual
    run_cell(page, exercise, f"%%exercise 2.3\n{right}")
    run_cell(page, check)
    text, earned, possible = report_of(check)
    assert earned == possible, text


def test_pipeline_report_draws_the_students_run(lab, page):
    open_notebook(page, lab, "exercises/01_parallelism.ipynb")
    run_cell(page, code_cell(page, "%load_ext autograder"))
    wait_idle(page)
    exercise = code_cell(page, "%%exercise 1.3")
    check = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text='check("1.3"'))
    wrong = edits.write(ROOT / "tests" / "submissions" / "ex1_3", "wrong_backward_after_each_forward", lab[2])
    run_cell(page, exercise, f"%%exercise 1.3\n{wrong.read_text()}")
    run_cell(page, check)
    text, earned, possible = report_of(check, "1.3")
    assert earned < possible and "GPipe runs the forwards of all" in text, text
    check.locator("summary", has_text="Your run, rank by rank").click()
    drawing = check.locator(".autograder-report svg")
    assert drawing.is_visible() and drawing.locator("text", has_text="rank 2").count() == 1
    check.screenshot(path=SHOTS / "exercise_1_3_wrong.png")


def wrong_then_right(lab, page, notebook: str, exercise_id: str, wrong: str, symptom: str, right: str):
    """Grades a control of ``exercise_id`` in JupyterLab, expecting ``symptom`` in its report, then a
    correct solution, expecting full marks; screenshots of both reports."""
    open_notebook(page, lab, f"exercises/{notebook}")
    run_cell(page, code_cell(page, "%load_ext autograder"))
    wait_idle(page)
    exercise = code_cell(page, f"%%exercise {exercise_id}")
    check = page.locator(".jp-CodeCell", has=page.locator(".cm-content", has_text=f'check("{exercise_id}"'))
    submissions = ROOT / "tests" / "submissions" / f"ex{exercise_id.replace('.', '_')}"
    run_cell(page, exercise, f"%%exercise {exercise_id}\n{edits.write(submissions, wrong, lab[2]).read_text()}")
    run_cell(page, check)
    text, earned, possible = report_of(check, exercise_id)
    check.screenshot(path=SHOTS / f"exercise_{exercise_id.replace('.', '_')}_wrong.png")
    assert earned < possible and symptom in text, text

    run_cell(page, exercise, f"%%exercise {exercise_id}\n{(submissions / f'{right}.py').read_text()}")
    run_cell(page, check)
    page.wait_for_function("cell => !cell.innerText.includes('Hint')", arg=check.element_handle(), timeout=240_000)
    text, earned, possible = report_of(check, exercise_id)
    check.screenshot(path=SHOTS / f"exercise_{exercise_id.replace('.', '_')}_right.png")
    assert earned == possible, text


def test_a_checkpoint_resumed_at_another_world_size_in_jupyterlab(lab, page):
    wrong_then_right(lab, page, "03_syncbn_sharding.ipynb", "3.5", "wrong_model_only", "the optimizer started afresh",
                     "correct_separate_parts")


def test_a_job_of_two_machines_in_jupyterlab(lab, page):
    """The check cell of 4.3 starts two real torchrun agents from the notebook's kernel."""
    wrong_then_right(lab, page, "04_torchrun.ipynb", "4.3", "wrong_writer_per_machine", "One writer per machine",
                     "correct_static")
