"""Check the course on a machine with GPUs before teaching on it: the grader's nccl paths and the lessons.

    python scripts/gpu_check.py [--lessons] [--out DIR] [--jobs N]

1. Grades every exercise's reference solution (solutions/) twice at the world sizes this machine's
   GPUs allow (one GPU per rank): with nccl, each rank on its own GPU, and with gloo on CPUs. Both
   gradings see the same code, data and world sizes, so every check must reach the same verdict;
   a check that passes on gloo and not on nccl is a fault of the GPU path, and is listed with its
   message. Checks that only run on GPUs must pass. An exercise whose smallest launch needs more
   GPUs than the machine has is listed as not checked, and so is one graded with gloo everywhere
   (its harness hands the student CPU tensors: Exercise.on_cpu).
2. With --lessons, runs every lesson top to bottom (as tests/test_lessons.py does on CPUs), beside
   the gradings, and lists any error or stderr output.

Prints what it found; exits 1 if anything differs or fails. On a machine without GPUs it says so and
stops: the test suite covers the gloo paths.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import exercises, source  # noqa: E402
from autograder.engine import gpu_count  # noqa: E402


def solution_of(exercise_id: str) -> Path:
    lesson = exercise_id.split(".")[0]
    return next((ROOT / "solutions").glob(f"0{lesson}_*.ipynb"))


def sizes_for(exercise_id: str, gpus: int) -> list[int]:
    return [w for w in exercises.get(exercise_id).world_sizes if w <= gpus]


def graded(exercise_id: str, sizes: list[int], backend: str) -> dict:
    command = [sys.executable, "-m", "autograder", "grade", exercise_id, str(solution_of(exercise_id)), "--json",
               "--quiet", "--backend", backend, "--world-sizes", ",".join(map(str, sizes)), "--timeout", "120"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": f"exit {done.returncode}: {done.stderr.strip()[-2000:]}"}


def differences(nccl: dict, gloo: dict) -> list[str]:
    """Each check whose verdict on nccl is not gloo's, and each GPU-only check that did not pass."""
    if "error" in nccl or "error" in gloo:
        return [f"the grader failed: {nccl.get('error') or gloo.get('error')}"]
    on_gloo = {c["name"]: c for c in gloo["checks"]}
    found = []
    for check in nccl["checks"]:
        other = on_gloo.get(check["name"])
        if other is None or other["status"] == "skipped":  # runs on GPUs only
            if check["status"] != "passed":
                found.append(f"GPU-only check {check['status']}: {check['name']}: {check['message']}")
        elif check["status"] != other["status"]:
            found.append(f"{check['name']}: {other['status']} on gloo, {check['status']} on nccl: {check['message']}")
    if nccl.get("problem") and not gloo.get("problem"):
        found.append("only on nccl: " + nccl["problem"][:1500])
    return found


def check_exercises(gpus: int, jobs: int) -> tuple[list[dict], int]:
    ids = [i for i in exercises.ids() if i in source.exercises_in(solution_of(i), exercises.ids())]
    plan = {i: [] if exercises.get(i).on_cpu else sizes_for(i, gpus) for i in ids}
    runnable = [i for i in ids if plan[i]]
    with ThreadPoolExecutor(jobs) as pool:
        results = {(i, b): pool.submit(graded, i, plan[i], b) for i in runnable for b in ("nccl", "gloo")}
    rows, faults = [], 0
    print(f"\nExercises: reference solutions graded with nccl and with gloo at world sizes <= {gpus}")
    for i in ids:
        if exercises.get(i).on_cpu:
            print(f"  {i}  gloo everywhere: its harness hands the student CPU tensors")
            rows.append({"exercise": i, "checked": False})
            continue
        if not plan[i]:
            needed = min(exercises.get(i).world_sizes)
            print(f"  {i}  not checked: its smallest launch has {needed} ranks")
            rows.append({"exercise": i, "checked": False})
            continue
        nccl, gloo = results[(i, "nccl")].result(), results[(i, "gloo")].result()
        found = differences(nccl, gloo)
        faults += bool(found)
        score = ("" if "error" in nccl or "error" in gloo else
                 f"nccl {nccl['score']:g}/{nccl['max_score']:g} in {nccl['elapsed']:.1f} s, "
                 f"gloo {gloo['score']:g}/{gloo['max_score']:g}")
        print(f"  {i}  world sizes {plan[i]}: {'same verdicts' if not found else 'DIFFERENT'}  {score}")
        for line in found:
            print(f"        {line}")
        rows.append({"exercise": i, "checked": True, "sizes": plan[i], "nccl": nccl, "gloo": gloo,
                     "differences": found})
    return rows, faults


def run_lesson(path: Path) -> dict:
    """One lesson top to bottom, in this process: its error, and every stderr output of its cells."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    start = time.monotonic()
    try:
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(path.parent)}}).execute()
        error = ""
    except Exception as exc:  # the cell's error is in its outputs too
        error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    stderr = [o.text[-800:] for o in outputs if o.output_type == "stream" and o.name == "stderr"]
    return {"lesson": path.name, "error": error, "stderr": stderr, "seconds": round(time.monotonic() - start)}


def start_lessons() -> list[tuple[Path, subprocess.Popen]]:
    """Every lesson in a process of its own, started now, so that they run beside the gradings."""
    return [(path, subprocess.Popen([sys.executable, __file__, "--lesson", str(path)], cwd=ROOT,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            for path in sorted((ROOT / "lessons").glob("*.ipynb"))]


def lesson_results(started) -> tuple[list[dict], int]:
    print("\nLessons, top to bottom")
    rows, faults = [], 0
    for path, proc in started:
        out, err = proc.communicate()
        try:
            row = json.loads(out)
        except json.JSONDecodeError:
            row = {"lesson": path.name, "error": f"the runner failed: {err[-1500:]}", "stderr": [], "seconds": 0}
        faults += bool(row["error"] or row["stderr"])
        print(f"  {row['lesson']}: {'ERROR' if row['error'] else 'ran'} in {row['seconds']} s"
              + (f", {len(row['stderr'])} stderr outputs" if row["stderr"] else ""))
        for text in ([row["error"]] if row["error"] else []) + row["stderr"]:
            print("        " + text.replace("\n", "\n        "))
        rows.append(row)
    return rows, faults


def machine() -> dict:
    import torch

    from autograder import sandbox

    return {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": gpu_count(),
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "sandbox": sandbox.probe()[1] or "bubblewrap", "device nodes": [str(p) for p in sandbox.gpu_device_nodes()]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", action="store_true", help="also run every lesson top to bottom")
    parser.add_argument("--out", type=Path, help="write every report found to DIR/gpu_check.json")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 3),
                        help="gradings at once (default: a third of the CPUs)")
    parser.add_argument("--lesson", type=Path, help=argparse.SUPPRESS)  # one lesson, as JSON (start_lessons)
    args = parser.parse_args()
    if args.lesson:
        print(json.dumps(run_lesson(args.lesson)))
        return 0
    facts = machine()
    print("Machine:", ", ".join(f"{k} {v}" for k, v in facts.items()))
    if not facts["gpus"]:
        print("No GPU here: nothing to check (the test suite covers the gloo paths).")
        return 0
    found, faults = {"machine": facts}, 0
    lessons = start_lessons() if args.lessons else []
    found["exercises"], n = check_exercises(facts["gpus"], args.jobs)
    faults += n
    if lessons:
        found["lessons"], n = lesson_results(lessons)
        faults += n
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_check.json").write_text(json.dumps(found, indent=1))
    print(f"\n{faults} fault(s) found." if faults else "\nNo fault found.")
    return 1 if faults else 0


if __name__ == "__main__":
    raise SystemExit(main())
