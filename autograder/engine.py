"""Grade one exercise: launch the student's code at each world size, then judge the checks.

This is the one engine behind every front end (command line, notebook, pytest, nbgrader).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from autograder import exercises, rank, source
from autograder.checks import SKIPPED_ON_CPU, Runs
from autograder.evidence import WorldRun, load
from autograder.launch import Layout, launch
from autograder.report import CheckResult, Report
from autograder.source import UsageError

NOT_STARTED = "not implemented yet"
GRADER_DIR = Path(__file__).parent
ABANDONED = ("A collective returns only once every rank has called it, so in a real job this rank would wait "
             "forever (here the others' exit closed its connections). Call every collective on every rank, "
             "and use its result only where you need it.")


def gpu_count() -> int:
    """GPUs visible, counted through NVML so that CUDA is not initialised before ranks fork."""
    count = torch.cuda._device_count_nvml() if torch.backends.cuda.is_built() else 0
    return max(count, 0)


def choose_backend(world_sizes: list[int], requested: str | None = None) -> str:
    """nccl when every rank of the largest launch can have its own GPU, else gloo.

    Order of precedence: the argument, then AUTOGRADER_BACKEND, then what the machine has.
    """
    requested = requested or os.environ.get("AUTOGRADER_BACKEND")
    if requested in ("gloo", "nccl"):
        return requested
    if requested:
        raise UsageError(f"unknown backend {requested!r}: use gloo or nccl")
    return "nccl" if gpu_count() >= max(world_sizes) else "gloo"


def grade(
    exercise_id: str,
    path: str | Path,
    world_sizes: list[int] | None = None,
    *,
    seed: int = 0,
    timeout: float | None = None,
    backend: str | None = None,
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    exercise = exercises.get(exercise_id)
    if exercise is None:
        raise UsageError(f"unknown exercise {exercise_id!r}; `python -m autograder list` shows the exercises")
    sizes = sorted(set(world_sizes or exercise.world_sizes))
    if not sizes or min(sizes) < 1:
        raise UsageError("world sizes must be positive integers, e.g. --world-sizes 1,2,3")
    chosen = choose_backend(sizes, backend)
    start = time.monotonic()
    torch.set_num_threads(1)  # ranks are forked from here; keep OpenMP out of the parent
    workdir = Path(tempfile.mkdtemp(prefix="autograder-"))
    try:
        student = source.extract(Path(path), exercise.id, workdir)
        report = _grade(exercise, student, sizes, chosen, seed, timeout or exercise.timeout, workdir, progress)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    report.elapsed = time.monotonic() - start
    return report


def _grade(exercise, student: Path, sizes, backend, seed, timeout, workdir, progress) -> Report:
    def report(checks, problem="", not_started=False):
        return Report(exercise.id, exercise.title, backend, sizes, checks, problem, 0.0, not_started)

    problem = source.compile_problem(student, exercise.entry)
    if problem:
        return report(_all_failed(exercise, "error", "not judged: the code does not run (see above)", backend), problem)
    for name in exercise.warm_imports:
        importlib.import_module(name)
    params = dict(exercise.params(seed), backend=backend)
    target = (
        rank.script_target(student)
        if exercise.kind == "script"
        else rank.function_target(student, exercise.harness, params)
    )
    worlds: list[WorldRun] = []
    for size in sizes:
        progress(f"exercise {exercise.id}: world size {size} ...")
        result = launch(target, (exercise.layout or Layout)(size), workdir / f"world{size}", use_gpus=backend == "nccl",
                        timeout=timeout)
        world = load(result)
        worlds.append(world)
        progress(f"exercise {exercise.id}: world size {size} {'done' if world.complete else 'FAILED'} "
                 f"in {world.elapsed:.1f} s")
        if _not_started(world):
            return report(_all_failed(exercise, "failed", NOT_STARTED, backend), _not_started_text(exercise), True)
        if not world.complete:
            break  # larger launches would fail the same way, only slower
    runs = Runs(worlds, backend, params)
    return report([check.judge(runs) for check in exercise.checks], describe_problem(worlds, student))


def _all_failed(exercise, status: str, message: str, backend: str) -> list[CheckResult]:
    return [
        CheckResult(c.name, "skipped", 0, c.points, SKIPPED_ON_CPU)
        if c.gpu_only and backend != "nccl"
        else CheckResult(c.name, status, 0, c.points, message)
        for c in exercise.checks
    ]


def _not_started(world: WorldRun) -> bool:
    return any(r.error_type == "NotImplementedError" for r in world.ranks)


def _not_started_text(exercise) -> str:
    return (f"Exercise {exercise.id} is not implemented yet: replace `raise NotImplementedError()` "
            "in the exercise cell with your code, run that cell, then run the check again.")


def describe_problem(worlds: list[WorldRun], student: Path) -> str:
    """The first crash or hang, told from the student's side: their frames first."""
    for world in worlds:
        r = world.failed_rank()
        if r is None:
            continue
        head = world.summary()
        if r is world.abandoned():
            body = ABANDONED
        elif r.error:
            body = tidy_traceback(r.error, student)
        elif r.exitcode is None:
            body = _hang_text(world, student)
        else:
            body = "Its last output:\n" + _tail(r.output)
        return f"{head}\n{body}"
    return ""


def _hang_text(world: WorldRun, student: Path) -> str:
    parts = []
    for r in world.ranks:
        if r.exitcode is None:
            stack = tidy_stack(r.stack, student)
            parts.append(f"rank {r.rank} was waiting here:\n{stack}" if stack else f"rank {r.rank} gave no stack")
        else:
            parts.append(f"rank {r.rank} had finished (exit code {r.exitcode})")
    return "\n".join(parts)


def tidy_traceback(text: str, student: Path) -> str:
    """Drop the grader's own frames; name the student's file 'exercise cell'."""
    lines = text.rstrip().splitlines()
    marker = f'File "{student}"'
    first = next((i for i, line in enumerate(lines) if marker in line), None)
    if first is not None:
        lines = ["Traceback (most recent call last):"] + lines[first:]
    kept, skipping = [], False
    for line in lines:
        if line.startswith("  File "):
            skipping = f"{GRADER_DIR}" in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept).replace(f'"{student}"', '"exercise cell"')


def tidy_stack(text: str, student: Path) -> str:
    """From a faulthandler dump, the main thread's frames in the student's code, innermost first."""
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((t for t in threads if t.startswith("Current thread")), threads[0] if threads else "")
    frames = [line.strip() for line in main.splitlines() if line.strip().startswith("File")]
    own = [f.replace(f'"{student}"', '"exercise cell"') for f in frames if str(student) in f]
    return "\n".join("  " + f for f in (own or frames[:3]))


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
