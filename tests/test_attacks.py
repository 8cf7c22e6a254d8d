"""The grader under attack: each way a submission could escape, write outside its sandbox, crash the grader,
flood the machine, or take marks without the work, tried as a hostile student would, through the front ends
it reaches. After every attack: nothing is left running, nothing is left in the grader's temporary
directory, and a file and a directory outside (a gradebook and its folder) are byte for byte, owner for
owner, as they were.

The attacks are tests/submissions/hostile/*; the places they aim at outside the sandbox are written into them
here (``__SENTINEL_FILE__`` ...), as an attacker learns them from /proc/self/mountinfo.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from autograder import engine, files, limits, sandbox
from conftest import ROOT, SUBMISSIONS, handed_in, needs_sandbox

HOSTILE = SUBMISSIONS / "hostile"
CORRECT_2_3 = SUBMISSIONS / "ex2_3" / "correct_strided.py"


def attack(name: str, dest: Path, **fill) -> Path:
    """The hostile submission ``name``, its blanks (``__KEY__``) filled, written to ``dest``."""
    text = (HOSTILE / f"{name}.py").read_text()
    for key, value in fill.items():
        text = text.replace(f"__{key.upper()}__", str(value))
    path = dest / f"{name}.py"
    path.write_text(text)
    return path


def exercise_of(name: str) -> str:
    return ".".join(name.rsplit("_", 2)[-2:])


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


# -- 1. nothing a rank wrote is used as a path, a module or a place to write -----------------------


@needs_sandbox
def test_a_planted_host_module_never_runs_and_the_next_host_is_sandboxed_again(tmp_path, clean, sentinel):
    marker = tmp_path / "planted-host-ran"
    with engine.Hosts("auto") as hosts:
        report = engine.grade("2.3", attack("plants_host_module_2_3", tmp_path, marker=marker), hosts=hosts)
        assert report.score == 0 and "rank host failed" in report.problem, report.to_text()
        after = engine.grade("2.3", CORRECT_2_3, hosts=hosts)  # a new host, started after the attack
    assert not marker.exists()
    assert after.all_passed and after.sandbox == "bubblewrap", after.to_text()


@pytest.mark.parametrize("front_end", ["command line", "kernel", "pytest", "nbgrader"])
@needs_sandbox
def test_a_planted_host_module_never_runs_through_any_front_end(front_end, tmp_path, clean, sentinel):
    marker = tmp_path / "planted-host-ran"
    code = attack("plants_host_module_2_3", tmp_path, marker=marker).read_text()
    scores = FRONT_ENDS[front_end](tmp_path, {"2.3": code, "2.1": _solution("2.1")}, "ps2")
    assert not marker.exists()
    assert scores["2.3"] == 0 and scores["2.1"] > 0, scores  # the notebook's other exercise is graded after it


@needs_sandbox
def test_links_where_the_grader_writes_change_nothing_outside(tmp_path, clean, sentinel):
    path = attack("links_out_2_3", tmp_path, sentinel_file=sentinel.file, sentinel_dir=sentinel.dir)
    report = engine.grade("2.3", path)
    assert report.checks and not report.problem.startswith("The grader itself failed"), report.to_text()


def test_links_where_the_grader_writes_change_nothing_outside_under_nbgrader(tmp_path, clean, sentinel):
    code = attack("links_out_2_3", tmp_path, sentinel_file=sentinel.file, sentinel_dir=sentinel.dir).read_text()
    scores = FRONT_ENDS["nbgrader"](tmp_path, {"2.3": code}, "ps2")
    assert "2.3" in scores


# -- 2. never a fallback once student code has run ---------------------------------------------


@needs_sandbox
def test_a_sandbox_that_fails_after_code_ran_fails_the_grading_instead_of_running_without_it(tmp_path, clean,
                                                                                         monkeypatch):
    with engine.Hosts("auto") as hosts:
        assert engine.grade("2.3", CORRECT_2_3, hosts=hosts).sandbox == "bubblewrap"
        os.killpg(hosts.kept[()].proc.pid, signal.SIGKILL)  # lost, as a submission can take it down
        monkeypatch.setattr(sandbox.Sandbox, "wrap", lambda self, command, **kw: ["/bin/false"])
        report = engine.grade("2.3", CORRECT_2_3, hosts=hosts)
    assert report.score == 0 and "rank host failed" in report.problem, report.to_text()
    assert report.sandbox != "off" and not report.sandbox_line().startswith("Ran without")


# -- 3. the sandbox shows an allowlist; the host cannot be traced ---------------------------------


@needs_sandbox
def test_what_the_sandbox_shows_from_under_tmp_is_there_and_outlives_every_clean_up(tmp_path, clean, monkeypatch):
    """A course cloned under /tmp: the sandbox's own /tmp must not hide its interpreter and packages, and
    emptying that /tmp after a grading must leave them."""
    given = tmp_path / "course-in-tmp" / "given.txt"
    given.parent.mkdir()
    given.write_text("shown")
    python_paths = sandbox._python_paths
    monkeypatch.setattr(sandbox, "_python_paths", lambda: [*python_paths(), given.parent])
    submission = tmp_path / "reads_what_is_shown.py"
    submission.write_text(CORRECT_2_3.read_text() + f"\nassert open({str(given)!r}).read() == 'shown'\n")
    with engine.Hosts("required") as hosts:
        for attempt in range(2):  # the second after the first grading's clean-up
            report = engine.grade("2.3", submission, hosts=hosts)
            assert report.all_passed and report.sandbox.startswith("bubblewrap"), report.to_text()


@needs_sandbox
def test_the_grader_the_course_the_answer_keys_and_the_host_are_out_of_reach(tmp_path, clean, sentinel):
    report = engine.grade("2.3", HOSTILE / "escapes_2_3.py")
    tried = report.problem.split("TRIED", 1)[1].splitlines()[0]
    assert tried.count("opened") == 0 and "traced" not in tried, tried
    assert int(tried.split("processes seen: ")[1].split("'")[0]) < 10
    assert not Path("/tmp/autograder-shared").exists()


@needs_sandbox
def test_a_module_hidden_from_an_exercise_cannot_be_loaded_by_its_file(clean):
    report = engine.grade("3.1", HOSTILE / "loads_hidden_by_path_3_1.py")
    assert report.score == 0 and "no file of ddpcourse.syncbn to load" in report.problem, report.to_text()


@needs_sandbox
def test_a_namespace_of_its_own_unmounts_nothing_the_sandbox_put_over_the_course(clean):
    report = engine.grade("3.1", HOSTILE / "loads_hidden_by_unmounting_3_1.py", [1])
    assert report.score == 0 and "no file of ddpcourse.syncbn to load" in report.problem, report.to_text()


@needs_sandbox
def test_the_sandbox_shows_the_ranks_only_what_they_need():
    shown = [option[-1] for option in sandbox.shown() if option[0] == "--ro-bind"]
    course = sandbox.package_dir("autograder").parent
    assert str(sandbox.package_dir("autograder")) not in shown and str(course) not in shown
    assert not any(Path(p) == Path.home() or Path(p) == Path("/tmp") for p in shown)
    assert "/" not in shown and "/etc" not in shown  # an allowlist, not the machine with holes


# -- 4. limits on the whole submission --------------------------------------------------------------

CGROUPS = limits.Group.create(limits.Limits(memory_mb=64))
if CGROUPS[0] is not None:
    CGROUPS[0].remove()
needs_cgroups = pytest.mark.skipif(CGROUPS[0] is None, reason=f"no control group here: {CGROUPS[1]}")


@needs_sandbox
@needs_cgroups
def test_children_that_together_take_too_much_memory_are_stopped_and_told(clean, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_MEMORY_MB", "1536")
    report = engine.grade("2.3", HOSTILE / "memory_flood_2_3.py", [1])
    assert report.score == 0
    assert "out of memory" in report.problem and "1536 MB in all" in report.problem, report.problem


@needs_sandbox
def test_files_that_together_exceed_the_work_directory_are_refused(clean, monkeypatch):
    monkeypatch.setenv("AUTOGRADER_WORK_MB", "256")
    with engine.Hosts("auto") as hosts:
        report = engine.grade("2.3", HOSTILE / "file_flood_2_3.py", [1], hosts=hosts)
        after = engine.grade("2.3", CORRECT_2_3, hosts=hosts)  # the same sandbox, emptied
    assert report.score == 0 and "no space left for files" in report.problem, report.problem
    assert after.all_passed, after.to_text()


@needs_sandbox
def test_a_checkpoint_that_inflates_to_a_gigabyte_is_not_inflated(clean):
    report = engine.grade("2.2", HOSTILE / "checkpoint_bomb_2_2.py", [1])
    assert "inflate" in report.to_text() or "could not be read" in report.to_text(), report.to_text()
    assert not report.problem.startswith("The rank host failed"), report.problem


def test_an_archive_or_array_that_claims_more_than_it_holds_is_never_made(tmp_path):
    import io
    import zipfile

    import numpy as np

    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }".ljust(118) + "\n"
    (tmp_path / "huge.npy").write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("a0.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f8", "fortran_order": False, "shape": (1 << 28,)})
            for _ in range(128):
                member.write(b"\0" * (1 << 24))  # 2 GB of zeros: a few MB deflated
    (tmp_path / "bomb.npz").write_bytes(bomb.getvalue())
    folder = files.Folder(tmp_path)
    assert folder.read_array("huge.npy") is None
    assert folder.read_array("bomb.npz", limit=64 << 20) is None
    folder.close()


# -- 5. every parser of rank data is total; every front end keeps going ------------------------------


@needs_sandbox
def test_what_chokes_a_parser_is_told_as_tampering_not_a_crash(clean):
    report = engine.grade("2.3", HOSTILE / "chokes_the_parsers_2_3.py")
    assert report.score == 0 and "instrumentation" in report.problem, report.to_text()


def test_what_chokes_a_parser_without_the_sandbox_is_cleaned_up_too(clean):
    report = engine.grade("2.3", HOSTILE / "chokes_the_parsers_2_3.py", sandbox_setting="off")
    assert report.score == 0 and "instrumentation" in report.problem, report.to_text()  # `clean`: 1,000 levels gone


def test_json_nested_past_any_depth_is_nothing_not_an_exception():
    assert files.parse_json(b"[" * 200_000 + b"]" * 200_000) is None
    assert files.parse_json(b'{"a": ' * 40 + b"1" + b"}" * 40) is None
    assert files.parse_json(b'{"kind": "enter", "t": 1.5}') == {"kind": "enter", "t": 1.5}


def test_a_cell_no_parser_can_read_is_told_in_one_line(tmp_path, clean):
    path = tmp_path / "minus.py"
    path.write_text("x = " + "-" * 100_000 + "1\n\ndef evaluate(model, dataset, batch_size=16):\n    return x\n")
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "2.3", str(path), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    report = json.loads(out.stdout)
    assert report["score"] == 0 and "does not compile" in report["checks"][0]["message"] + json.dumps(report)


@needs_sandbox
def test_junk_on_every_descriptor_a_rank_has_reaches_no_grader_and_the_next_check_is_right(clean):
    with engine.Hosts("auto") as hosts:
        engine.grade("2.3", HOSTILE / "floods_the_host_pipe_2_3.py", hosts=hosts)
        after = engine.grade("2.3", CORRECT_2_3, hosts=hosts)
    assert after.all_passed, after.to_text()


def test_torchruns_help_in_a_launch_command_does_not_reach_the_graders_output(tmp_path, clean):
    cell = (ROOT / "tests" / "submissions" / "ex4_3" / "correct_c10d.py").read_text()
    path = tmp_path / "help.py"
    path.write_text(cell.replace("torchrun ", "torchrun --help ", 1))
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "4.3", str(path), "--json", "--quiet"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    report = json.loads(out.stdout)  # nothing else on stdout
    assert report["score"] == 0 and "help" in json.dumps(report)


@pytest.mark.parametrize("front_end", ["command line", "nbgrader"])
def test_a_failure_of_the_grader_itself_costs_its_exercise_only(front_end, tmp_path, clean, monkeypatch):
    real = engine._grade_on

    def breaks_on_2_3(exercise, *args, **kwargs):
        if exercise.id == "2.3":
            raise RuntimeError("the grader broke")
        return real(exercise, *args, **kwargs)

    monkeypatch.setattr(engine, "_grade_on", breaks_on_2_3)
    scores = FRONT_ENDS_IN_PROCESS[front_end](tmp_path, {"2.3": _solution("2.3"), "2.1": _solution("2.1")}, "ps2")
    assert scores["2.3"] == 0 and scores["2.1"] > 0, scores


def test_a_notebook_no_parser_can_read_stops_no_collection(tmp_path):
    nested = tmp_path / "deep.ipynb"
    nested.write_text('{"cells": ' + "[" * 100_000 + "]" * 100_000 + ', "%%exercise 2.3": 1}')
    good = tmp_path / "good.ipynb"
    nbformat.write(handed_in(ROOT / "exercises" / "02_ddp_basics.ipynb", {"2.1": _solution("2.1")}), good)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path),
                          "-k", "2.1"], capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert "1 passed" in out.stdout, out.stdout[-2000:]


# -- 6. answers and expected values out of the ranks' reach --------------------------------------------


def test_a_concept_check_is_read_from_the_cell_never_run(tmp_path, clean):
    report = engine.grade("1.0", HOSTILE / "brute_forces_answers_1_0.py")
    assert report.score == 0 and "written out as a dictionary" in report.to_text(), report.to_text()
    assert report.sandbox.startswith("not needed")


def test_a_concept_check_takes_arithmetic_but_runs_nothing(tmp_path, clean):
    path = tmp_path / "answers.py"
    path.write_text(textwrap.dedent("""
        MB = 100
        ANSWERS = {"adam_bytes": 4 * 4, "skipped_collective": "b", "ring_sent": 2 * (4 - 1) / 4 * MB,
                   "naive_sent": 3 * MB, "bubble": "3/7", "tp_allreduces": 2}
        ANSWERS["bubble"] = 3 / 7
        open("/tmp/ran", "w")  # never run
    """))
    report = engine.grade("1.0", path)
    assert report.all_passed, report.to_text()
    assert not Path("/tmp/ran").exists()


@needs_sandbox
def test_code_that_claims_the_recorders_file_name_records_nothing(clean):
    report = engine.grade("2.3", HOSTILE / "compiles_as_the_recorder_2_3.py")
    assert report.score == 0 and "instrumentation" in report.problem, report.to_text()


def test_no_worker_of_a_job_can_find_where_its_fault_lands(host, tmp_path):
    from autograder import evidence, jobs
    from conftest import code_for

    hunt = """
        import gc, os, sys, torch
        found = [k for k in os.environ if "FAULT" in k or "PLAN" in k]
        for obj in gc.get_objects():
            if isinstance(obj, dict) and {"rank", "attempt", "when"} <= set(map(str, obj)):
                found.append(repr(obj)[:80])
        frame = sys._getframe()
        while frame is not None:
            found += [repr(v)[:80] for v in frame.f_locals.values() if "when" in repr(v)[:2000]]
            frame = frame.f_back
        print("FOUND", found, flush=True)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            optimizer.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            optimizer.step()
    """
    job = jobs.standalone(2, restarts=1, fault={"rank": 1, "attempt": 0, "when": "step", "n": 2})
    result = host.job(job.request(str(code_for(host, "hunt", hunt)), "gloo"), job.layout, host.directory(None, "job"))
    world = evidence.load(result, job)
    assert world.complete and world.faults and len(world.attempts) == 2, world.agent_output
    outputs = [r.output for attempt in world.attempts for r in attempt]
    assert all("FOUND []" in out for out in outputs if "FOUND" in out), outputs


# -- 7. the boundary, visible in the layout ----------------------------------------------------------


def _imports(package: Path) -> set[str]:
    import ast

    found = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found


def test_what_runs_in_the_sandbox_imports_nothing_of_the_judge_and_the_judge_nothing_of_it():
    assert "autograder" not in _imports(sandbox.package_dir("ranks"))
    assert "ranks" not in _imports(sandbox.package_dir("autograder"))
    assert "autograder" not in _imports(sandbox.package_dir("ddpcourse"))
    assert "ranks" not in _imports(sandbox.package_dir("ddpcourse"))


# -- front ends: one notebook, graded as each user grades it -------------------------------------------


def _solution(exercise_id: str) -> str:
    folder = SUBMISSIONS / f"ex{exercise_id.replace('.', '_')}"
    return next(p for p in sorted(folder.glob("correct_*.py"))).read_text()


def _notebook(tmp_path: Path, cells: dict[str, str], name: str = "02_ddp_basics.ipynb") -> Path:
    path = tmp_path / "submitted" / name
    path.parent.mkdir(exist_ok=True)
    nbformat.write(handed_in(ROOT / "exercises" / name, cells), path)
    return path


def _by_command_line(tmp_path, cells, assignment) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "autograder", "grade", "all", str(_notebook(tmp_path, cells)),
                          "--json", "--quiet"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    return {r["exercise"]: r["score"] for r in json.loads(out.stdout)["exercises"]}


def _by_kernel(tmp_path, cells, assignment) -> dict[str, float]:
    from autograder.server import WarmGrader

    grader, scores = WarmGrader(), {}
    try:
        for exercise_id in cells:
            path = tmp_path / f"cell_{exercise_id}.ipynb"
            nbformat.write(handed_in(ROOT / "exercises" / "02_ddp_basics.ipynb", {exercise_id: cells[exercise_id]}), path)
            answer, problem = grader.ask({"exercise": exercise_id, "path": str(path), "seed": 0}, 240)
            scores[exercise_id] = answer["report"]["score"] if answer and "report" in answer else problem
    finally:
        grader.stop()
    return scores


def _by_pytest(tmp_path, cells, assignment) -> dict[str, float]:
    path = _notebook(tmp_path, cells)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(path),
                          "-k", " or ".join(cells)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    outcome = {line.split()[1].split("::")[-1]: line.split()[0] for line in out.stdout.splitlines()
               if line.startswith(("PASSED ", "FAILED ", "ERROR "))}
    return {exercise_id: {"PASSED": 1, "FAILED": 0}.get(outcome.get(f"exercise[{exercise_id}]"), out.stdout[-1500:])
            for exercise_id in cells}


def _by_nbgrader(tmp_path, cells, assignment) -> dict[str, float]:
    from nbgrader.preprocessors import LockCells  # noqa: F401 (nbgrader importable: its preprocessor base)

    from autograder.nbgrader_grading import GradeInSandbox, check_call

    source = nbformat.read(ROOT / "solutions" / "02_ddp_basics.ipynb", as_version=4)
    submitted = nbformat.read(_notebook(tmp_path, cells), as_version=4)
    checks = [c for c in source.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")
              and c.metadata["nbgrader"].get("locked") and "check(" in c.source]
    student = [c for c in submitted.cells if c.cell_type == "code" and "%%exercise" in c.source]
    graded, _ = GradeInSandbox().preprocess(nbformat.v4.new_notebook(cells=[*student, *checks]), {})
    scores = {}
    for cell in graded.cells:
        call = check_call(cell.source) if "check(" in cell.source else None
        if call and call[0] in cells:
            scores[call[0]] = float(cell.outputs[0]["data"]["text/plain"])
    return scores


FRONT_ENDS = {"command line": _by_command_line, "kernel": _by_kernel, "pytest": _by_pytest, "nbgrader": _by_nbgrader}


def _in_process_command_line(tmp_path, cells, assignment) -> dict[str, float]:
    import contextlib
    import io

    from autograder import cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        cli.main(["grade", "all", str(_notebook(tmp_path, cells)), "--json", "--quiet"])
    return {r["exercise"]: r["score"] for r in json.loads(out.getvalue())["exercises"]}


FRONT_ENDS_IN_PROCESS = {"command line": _in_process_command_line, "nbgrader": _by_nbgrader}
