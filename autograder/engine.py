"""Grade one exercise: launch the student's code at each world size, then judge the checks.

This is the one engine behind every front end (command line, notebook, pytest, nbgrader).
The submission runs in a rank host (launch.py, host.py), inside the sandbox (sandbox.py)
when the machine has one; this process only reads what the ranks left as plain data
(evidence.py), computes the values the checks compare with, and judges.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from autograder import exercises, sandbox, source
from autograder.launch import HostFailed, Layout, RankHost
from autograder.report import Report
from autograder.source import UsageError

# The checks, the evidence and the references import torch: only once the rank host is on its way.

NOT_STARTED = "not implemented yet"
_EXPORTS_PER_WORLD = 4  # checkpoints read back per launch at most


class SandboxRequired(UsageError):
    """The caller asked for the sandbox and this machine cannot run it."""


def gpu_count() -> int:
    """GPUs visible, counted through NVML so that CUDA is not initialised in the grader."""
    import torch

    count = torch.cuda._device_count_nvml() if torch.backends.cuda.is_built() else 0
    return max(count, 0)


def choose_backend(world_sizes: list[int], requested: str | None = None) -> str:
    """nccl when every rank of the largest launch can have its own GPU, else gloo.

    Order of precedence: the argument, then AUTOGRADER_BACKEND, then what the machine has.
    """
    requested = requested or os.environ.get("AUTOGRADER_BACKEND")
    if requested and requested not in ("gloo", "nccl"):
        raise UsageError(f"unknown backend {requested!r}: use gloo or nccl")
    if requested == "gloo":
        return "gloo"
    gpus, ranks = gpu_count(), max(world_sizes)
    if requested == "nccl" and gpus < ranks:
        raise UsageError(f"nccl needs a GPU of its own for every rank: this grading launches up to {ranks} "
                         f"ranks and this machine has {gpus} GPU(s). Grade with --backend gloo, or with "
                         f"--world-sizes of at most {gpus}."
                         if gpus else "nccl needs GPUs and this machine has none: grade with --backend gloo.")
    return "nccl" if gpus >= ranks else "gloo"


def sandbox_mode(requested: str | None = None) -> str:
    """"auto" (use it where it runs), "required" (refuse to grade without it) or "off".

    Order of precedence: the argument, then AUTOGRADER_SANDBOX.
    """
    mode = (requested or os.environ.get("AUTOGRADER_SANDBOX") or "auto").lower()
    mode = {"1": "required", "on": "required", "0": "off", "no": "off"}.get(mode, mode)
    if mode not in ("auto", "required", "off"):
        raise UsageError(f"unknown sandbox setting {mode!r}: use auto, required or off")
    return mode


def start_host(root: Path, mode: str, hide: list[Path]) -> tuple[RankHost, str]:
    """A rank host for ``root``, sandboxed where possible, and what the report says of the sandbox."""
    box, why = (None, "turned off") if mode == "off" else sandbox.probe()
    if box is None and mode == "required":
        raise SandboxRequired(f"the sandbox is required but cannot run here: {why}")
    if box is not None:
        host = RankHost(root, sandbox=box, hide=hide)
        try:
            host.started()
            return host, "bubblewrap"
        except HostFailed as exc:
            host.close()
            why = f"bubblewrap could not start here: {str(exc).splitlines()[-1][:200]}"
            if mode == "required":
                raise SandboxRequired(f"the sandbox is required but cannot run here: {why}") from None
    host = RankHost(root, hide=hide)
    host.started()
    return host, f"off ({why})"


def live_host(current: tuple[RankHost, str] | None, root: Path, mode: str,
              hide: list[Path]) -> tuple[RankHost, str]:
    """``current`` (a host and its sandbox note) while its host runs, else a new one: the ranks of the
    last submission it served may have taken it down."""
    if current is not None:
        if current[0].proc.poll() is None:
            return current
        current[0].close()
    return start_host(root, mode, hide)


def grade(
    exercise_id: str,
    path: str | Path,
    world_sizes: list[int] | None = None,
    *,
    seed: int = 0,
    timeout: float | None = None,
    backend: str | None = None,
    sandbox_setting: str | None = None,
    host: RankHost | None = None,
    sandbox_note: str = "",
    progress: Callable[[str], None] = lambda line: None,
) -> Report:
    """Grade the exercise in ``path``. With ``host`` (a warm one, kept by the caller) no new host starts."""
    if exercise_id not in exercises.ids():
        raise UsageError(f"unknown exercise {exercise_id!r}; `python -m autograder list` shows the exercises")
    if world_sizes is not None and (not world_sizes or min(world_sizes) < 1):
        raise UsageError("world sizes must be positive integers, e.g. --world-sizes 1,2,3")
    code = source.read_exercise(Path(path), exercise_id)
    mode = sandbox_mode(sandbox_setting)
    start = time.monotonic()
    own_host = host is None
    root = Path(tempfile.mkdtemp(prefix="autograder-")) if own_host else host.workspace()
    try:
        if own_host:  # it imports torch while this process does the same
            host, sandbox_note = start_host(root, mode, hidden_from_ranks(Path(path)))
        exercise = exercises.get(exercise_id)  # imports torch
        # In the exercise's order: one exercise's launches form a chain (3.5 resumes each from the last)
        sizes = list(dict.fromkeys(world_sizes or exercise.world_sizes))
        host.prepare(exercise.warm_imports)
        student = source.write_module(code, root)
        jobs, problem = (), source.compile_problem(student, exercise.entry)
        if source.as_handed_out(code):  # nothing to launch: say so at once
            problem = NOT_STARTED
        elif not problem:
            jobs, problem = _jobs(exercise, code)
        if problem == NOT_STARTED:
            report = Report(exercise.id, exercise.title, "gloo", sizes, exercise.same_result("failed", NOT_STARTED, "gloo"),
                            _not_started_text(exercise), 0.0, True)
        elif problem:
            report = Report(exercise.id, exercise.title, "gloo", sizes,
                            exercise.same_result("error", "not judged: the code does not run (see above)", "gloo"), problem)
        else:
            chosen = "gloo" if exercise.on_cpu else choose_backend(sizes, backend)
            report = _grade(exercise, host, student, root, sizes, chosen, seed, timeout or exercise.timeout, progress,
                            jobs, _own_cells(exercise, Path(path), root))
        report.sandbox = sandbox_note
    finally:
        if own_host and host is not None:
            host.close()
        remove_tree(root)
    report.elapsed = time.monotonic() - start
    return report


def grade_each(exercise_ids: list[str], path: str | Path, world_sizes: list[int] | None = None, *,
               sandbox_setting: str | None = None, **options) -> list[Report]:
    """Several exercises of one submission (a notebook), served by one rank host, as its notebook would be."""
    if len(exercise_ids) == 1:
        return [grade(exercise_ids[0], path, world_sizes, sandbox_setting=sandbox_setting, **options)]
    root = Path(tempfile.mkdtemp(prefix="autograder-"))
    kept = None
    try:
        reports = []
        for exercise_id in exercise_ids:
            fresh = kept is None or kept[0].proc.poll() is not None
            kept = live_host(kept, root, sandbox_mode(sandbox_setting), hidden_from_ranks(Path(path)))
            if fresh:  # every module the exercises need, imported once, while this process imports torch
                kept[0].prepare(exercises.warm_imports(exercise_ids))
            reports.append(grade(exercise_id, path, world_sizes, host=kept[0], sandbox_note=kept[1], **options))
        return reports
    finally:
        if kept is not None:
            kept[0].close()
        remove_tree(root)


def hidden_from_ranks(path: Path) -> list[Path]:
    """Directories the ranks must not see: where the student works, and the course itself."""
    course = Path(__file__).resolve().parent.parent
    return [Path.cwd(), path.resolve().parent, course]


def _own_cells(exercise, path: Path, root: Path) -> dict[str, str]:
    """The student's cells of the exercises this one also runs (Exercise.uses) that could run: id -> module path."""
    written = {}
    for other, code in source.cells_of(path, exercise.uses).items():
        module = source.write_module(code, root, f"exercise_{other.replace('.', '_')}.py")
        if not source.as_handed_out(code) and not source.compile_problem(module, exercises.get(other).entry):
            written[other] = str(module)
    return written


def _jobs(exercise, code: str) -> tuple[tuple, str | None]:
    """The exercise's torchrun jobs: its own, or those the student's cell writes; or why they cannot run."""
    if exercise.jobs_of is None:
        return exercise.jobs, None
    from autograder.nodes import CommandError

    try:
        return exercise.jobs_of(code), None
    except CommandError as exc:
        return (), f"The launch commands cannot run as written: {exc}."


def _grade(exercise, host: RankHost, student: Path, root: Path, sizes, backend, seed, timeout, progress,
           jobs=(), own_cells=None) -> Report:
    from autograder.checks import Runs, gate, judge_all
    from autograder.diagnosis import describe_problem
    from autograder.evidence import load

    def report(checks, problem="", not_started=False):
        return Report(exercise.id, exercise.title, backend, sizes, checks, problem, 0.0, not_started)

    target = ({"kind": "script", "student": str(student)} if exercise.kind == "script" else
              {"kind": "function", "student": str(student), "exercise": exercise.id, "params": exercise.params(seed)})
    worlds = []
    for k, (layout, job) in enumerate(_launches(exercise, sizes, jobs)):
        label = job.name if job else f"world size {layout.world_size}"
        progress(f"exercise {exercise.id}: {label} ...")
        try:
            if job is None:
                result = host.launch(target, layout, root / f"world{layout.world_size}", backend=backend,
                                     timeout=timeout, quiet=exercise.quiet)
            else:
                result = host.job(job.request(str(student), backend), layout, root / f"job{k}", timeout=timeout,
                                  quiet=exercise.quiet, meet_within=job.meet_within)
        except HostFailed as exc:
            return report(exercise.same_result("error", "not judged: the grader lost the ranks", backend),
                          f"The rank host failed: {exc}")
        world = load(result, job)
        _export_checkpoints(host, world, [world.workdir / "run" / name for name in exercise.exported] if job else [])
        worlds.append(world)
        progress(f"exercise {exercise.id}: {label} {'done' if world.complete else 'FAILED'} in {world.elapsed:.1f} s")
        if _not_started(world):
            return report(exercise.same_result("failed", NOT_STARTED, backend), _not_started_text(exercise), True)
        if world.timed_out:
            break  # larger launches would only wait as long again
    own = None
    if own_cells and all(w.complete for w in worlds):
        own = _launch_own_cells(exercise, host, {**target, "companions": own_cells}, root, backend, timeout, progress)
    runs = Runs(worlds, backend, {**exercise.params(seed), **exercise.expected(seed)}, own)
    checks = judge_all(exercise, runs)
    # the bugs left first, then a crash, then why nothing counts
    problems = (exercise.tally(checks), describe_problem(worlds, student), gate(exercise, runs))
    done = report(checks, "\n\n".join(p for p in problems if p))
    done.timeline = _timeline(exercise, worlds)
    return done


# Seconds for the launch of the student's other cells: one small step each, which a cell stuck in a
# loop must not turn into the whole exercise's time limit, for a check worth nothing.
OWN_CELLS_TIMEOUT = 8.0


def _launch_own_cells(exercise, host: RankHost, target: dict, root: Path, backend, timeout, progress):
    """The launch that runs the student's cells of other exercises (Exercise.uses); None if the host failed."""
    from autograder.evidence import load

    layout = (exercise.layout or Layout)(exercise.uses_world_size)
    progress(f"exercise {exercise.id}: your cells of {', '.join(sorted(target['companions']))} ...")
    try:
        result = host.launch(target, layout, root / "own", backend=backend, timeout=min(timeout, OWN_CELLS_TIMEOUT),
                             quiet=exercise.quiet)
    except HostFailed:
        return None
    return load(result, None)


def _launches(exercise, sizes, jobs=()):
    """(layout, job) for each launch: the exercise's torchrun jobs of those sizes, else a forked launch
    (job None) per world size."""
    if jobs:
        return [(job.layout, job) for job in jobs if job.world_size in sizes]
    return [((exercise.layout or Layout)(size), None) for size in sizes]


def _timeline(exercise, worlds) -> dict | None:
    """The launch to draw: the first that did not complete (where each rank stopped), else the largest."""
    from autograder.timeline import of_world

    world = next((w for w in worlds if not w.complete), None) or max(worlds, key=lambda w: w.world_size)
    if world.world_size == 1 and world.complete:
        return None  # one rank alone shows no distributed behaviour
    drawn = of_world(world, f"Your run at {world.label}", exercise.timeline_between)
    return drawn.to_dict() if drawn else None


def _export_checkpoints(host: RankHost, world, named: list[Path] = ()):
    """Every file a rank saved with torch.save, and the files ``named``, read back by the host as plain arrays."""
    paths = list(dict.fromkeys([str(p) for p in named] + [
        e["path"] for r in world.ranks for e in r.of("save") if isinstance(e.get("path"), str)]))
    from autograder import files

    folder = files.Folder(world.workdir)
    try:
        for k, path in enumerate(paths[:_EXPORTS_PER_WORLD]):
            try:
                info = host.export(path, world.workdir / f"export{k}.npz")
            except HostFailed:
                break
            if info.get("type") == "dict":
                arrays = folder.read_array(f"export{k}.npz") or {}
                names = info.get("tensors") if isinstance(info.get("tensors"), list) else []
                info["arrays"] = {str(n): arrays[f"a{i}"] for i, n in enumerate(names) if f"a{i}" in arrays}
            world.exports[path] = info
    finally:
        folder.close()


def _not_started(world) -> bool:
    return any(r.error_type == "NotImplementedError" for r in world.ranks)


def _not_started_text(exercise) -> str:
    return (f"Exercise {exercise.id} is not implemented yet: replace `raise NotImplementedError()` "
            "in the exercise cell with your code, then check it again.")


def remove_tree(root: Path):
    """The work directory, whatever the ranks did to its permissions."""
    def unlock(function, path, _):
        try:
            os.chmod(os.path.dirname(path), 0o700)
            os.chmod(path, 0o700)
            function(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=unlock)
