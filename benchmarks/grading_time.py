"""How long grading takes, and what that time is made of. Prints figures; asserts nothing.

    python benchmarks/grading_time.py [--repeat 3]

The floor is a fresh interpreter that imports torch: every front end that starts a new
process pays it once. The target is one exercise graded at world sizes 1, 2 and 3 in
under twice that floor. Lesson 4's exercises run under the real torchrun: their target is
the time of their torchrun launches plus at most 1 s of the grader's own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = {ex: ROOT / "tests" / "submissions" / f"ex{ex.replace('.', '_')}" / name for ex, name in {
    "1.1": "correct_loops.py", "1.2": "correct_async.py", "1.3": "correct_blocking.py",
    "1.4": "correct_functions.py", "1.5": "correct_counted.py", "2.1": "correct_environ.py", "2.2": "correct_tutorial.py",
    "2.3": "correct_strided.py", "2.4": "correct_contextlib.py", "3.1": "correct_differentiable.py",
    "3.2": "correct_convert.py", "3.3": "correct_consolidate.py", "3.4": "correct_state_dict_api.py",
    "3.5": "correct_get_state_dict.py", "3.6": "correct_loops.py"}.items()}


def timed(command: list[str], **kwargs) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT, **kwargs)
    return time.perf_counter() - start


def median(fn, repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def row(label: str, seconds: float, floor: float | None = None):
    ratio = f"{seconds / floor:5.2f} x floor" if floor else ""
    print(f"  {label:<58} {seconds:6.2f} s   {ratio}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    repeat = parser.parse_args().repeat
    py = sys.executable

    print("Floor and its parts (median of", repeat, "runs)")
    floor = median(lambda: timed([py, "-c", "import torch"]), repeat)
    row("fresh interpreter importing torch (the floor)", floor, floor)
    dynamo = median(lambda: timed([py, "-c", "import torch, torch._dynamo"]), repeat) - floor
    row("+ torch._dynamo, which DDP's constructor imports", dynamo)

    print("\nLaunching ranks (one warm rank host)")
    from autograder.engine import Hosts
    from autograder.launch import Layout

    with tempfile.TemporaryDirectory() as tmp, Hosts("auto") as hosts:
        host = hosts.get()
        note = hosts.note(host)
        code, inside = host.code_directory()
        (code / "noop.py").write_text("pass\n")
        for size in (1, 2, 3):
            seconds = median(lambda: host.launch({"kind": "script", "student": str(inside / "noop.py")}, Layout(size),
                                                 host.directory(None, f"w{size}")).elapsed, repeat)
            row(f"fork {size} rank(s), rendezvous store, reap ({note})", seconds)
        script = Path(tmp) / "group.py"
        script.write_text("import torch.distributed as dist\ndist.init_process_group('gloo')\ndist.destroy_process_group()\n")
        seconds = timed([py, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                         "--log-dir", str(Path(tmp) / "logs"), str(script)])
        row("one real torchrun launch of 2 ranks (init + destroy only)", seconds, floor)

    print("\nOne exercise at world sizes 1, 2, 3, correct solution, command line (fresh interpreter)")
    print("  paired: each run in the sandbox is followed by one without it")
    overheads, by_lesson = [], {}
    for ex, path in SOLUTIONS.items():
        runs = {"on": [], "off": []}
        for _ in range(repeat):
            for mode in ("on", "off"):
                env = dict(os.environ, AUTOGRADER_SANDBOX="auto" if mode == "on" else "off")
                runs[mode].append(timed([py, "-m", "autograder", "grade", ex, str(path), "--quiet"], env=env))
        on, off = statistics.median(runs["on"]), statistics.median(runs["off"])
        overheads.append(on / off)
        by_lesson.setdefault(ex.split(".")[0], []).append(on)
        row(f"{ex} in the sandbox", on, floor)
        row(f"{ex} without it (--sandbox off)", off, floor)
    print(f"  sandbox cost, median over the exercises: {100 * (statistics.median(overheads) - 1):+.0f}%")
    for lesson, times in by_lesson.items():
        row(f"lesson {lesson}: median over its exercises, in the sandbox", statistics.median(times), floor)

    print("\nLesson 4 under the real torchrun (one warm rank host): grading = the jobs + the grader's own time")
    torchrun_jobs(repeat)

    print("\nThe notebook's check cell (one warm grader per kernel)")
    from autograder import exercises
    from autograder.server import WarmGrader

    cold = WarmGrader()
    try:
        start = time.perf_counter()
        cold.ask({"exercise": "2.3", "path": str(SOLUTIONS["2.3"]), "seed": 0}, 120)
        row("2.3 checked at once, the grader not warmed up", time.perf_counter() - start, floor)
    finally:
        cold.stop()
    grader = WarmGrader()
    grader.warm_up()  # as %load_ext autograder does
    time.sleep(40)  # the student reads and writes before the first check: longer than this, and on
    # two CPUs the host needs about that long to import what every exercise needs
    try:
        paths = {**SOLUTIONS, **{ex: ROOT / "tests" / "submissions" / name for ex, name in TORCHRUN.items()}}
        paths["1.5 beside the student's 1.1-1.4"] = ROOT / "solutions" / "01_parallelism.ipynb"
        reached = set()
        for ex in ["2.3", *(ex for ex in paths if ex != "2.3")]:
            request = {"exercise": ex.split()[0], "path": str(paths[ex]), "seed": 0}
            lesson = ex.split(".")[0]
            if lesson not in reached and exercises.views_near(ex.split()[0]):
                grader.warm_up(ex.split()[0])  # as the lesson's first exercise cell does (notebook.py)
                time.sleep(10)  # and the student reads it: a host of the lesson's view starts meanwhile
            reached.add(lesson)
            for attempt in ("first check of the kernel" if ex == "2.3" else "first check", "a later check"):
                start = time.perf_counter()
                grader.ask(request, 120)
                row(f"{ex}: {attempt}", time.perf_counter() - start, floor)
    finally:
        grader.stop()


TORCHRUN = {"4.1": "ex4_1/correct_argparse.py", "4.2": "ex4_2/correct_epoch_snapshots.py",
            "4.3": "ex4_3/correct_c10d.py", "4.4": "ex4_4/correct_fixed.py", "4.5": "ex4_5/correct_job_generator.py",
            "4.6": "ex4_6/correct_torchrun.py"}


def torchrun_jobs(repeat: int):
    from autograder import engine, exercises, jobs

    with engine.Hosts("auto") as hosts:
        host = hosts.get()
        host.prepare(jobs.WARM_IMPORTS)  # as a warm grader's host has done before the first check
        host.wait_ready()  # the host's own start (it imports torch once) is not any exercise's
        for ex in TORCHRUN:  # nor is the grader's import of torch: a warm grader has it, the command line
            exercises.get(ex)  # pays it once per process, as the floor above
        for ex, name in TORCHRUN.items():
            totals, launches = [], []
            for _ in range(repeat):
                lines = []
                start = time.perf_counter()
                engine.grade(ex, ROOT / "tests" / "submissions" / name, hosts=hosts, progress=lines.append)
                totals.append(time.perf_counter() - start)
                launches.append(sum(float(line.rsplit(" in ", 1)[1].split()[0]) for line in lines if line.endswith(" s")))
            total, jobs = statistics.median(totals), statistics.median(launches)
            row(f"{ex}: grading, all its jobs", total)
            row(f"{ex}: of which the torchrun jobs themselves", jobs)
            row(f"{ex}: the grader's own time (target: at most 1 s)", total - jobs)


if __name__ == "__main__":
    main()
