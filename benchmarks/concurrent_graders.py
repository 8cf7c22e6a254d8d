"""Several graders of lesson 4 at once on one machine: each must score what it scores alone, on a
rendezvous of its own, and leave no process behind. Prints figures; asserts nothing.

    python benchmarks/concurrent_graders.py [--graders 8] [--exercise 4.3] [--sandbox auto] [--timeout S]

Each grader is a separate `python -m autograder grade` of a correct solution; none is told a port.
Exercise 4.3 runs two torchrun agents per grader that meet at a c10d rendezvous on a port the grader
picks, so with the sandbox off (every grader in the machine's one network) this is where two
graders could meet each other's agents. On a small machine 8 graders at once need more than the
exercise's time limit (8 jobs of 4 workers on 2 CPUs): --timeout gives each launch more.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from grading_time import ROOT, TORCHRUN as SOLUTIONS  # a correct solution of each lesson-4 exercise


def workers_alive() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "ranks.worker" in line or "ranks.host" in line]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--graders", type=int, default=8)
    parser.add_argument("--exercise", default="4.3", choices=sorted(SOLUTIONS))
    parser.add_argument("--sandbox", default="auto", choices=("auto", "off"))
    parser.add_argument("--timeout", type=float, help="seconds allowed per launch (default: the exercise's)")
    args = parser.parse_args()
    solution = ROOT / "tests" / "submissions" / SOLUTIONS[args.exercise]
    env = {**os.environ, "AUTOGRADER_SANDBOX": args.sandbox}
    command = [sys.executable, "-m", "autograder", "grade", args.exercise, str(solution), "--json", "--quiet"]
    command += ["--timeout", str(args.timeout)] if args.timeout else []

    start = time.perf_counter()
    graders = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
                                env=env) for _ in range(args.graders)]
    limit = f"{args.timeout:g} s" if args.timeout else "the exercise's"
    print(f"{args.graders} graders of {args.exercise} at once, sandbox {args.sandbox}, time limit {limit}:")
    for k, grader in enumerate(graders):
        out, _ = grader.communicate(timeout=1200)
        try:
            report = json.loads(out)
            said = f"{report['score']:g}/{report['max_score']:g} in {report.get('elapsed', 0):.1f} s"
            if report.get("problem"):
                said += f"  ({report['problem'].splitlines()[0][:120]})"
        except (ValueError, KeyError):
            said = f"no report (exit {grader.returncode})"
        print(f"  grader {k}: {said}")
    print(f"  all done after {time.perf_counter() - start:.1f} s")
    time.sleep(1)
    left = workers_alive()
    print(f"  processes left behind: {len(left)}" + "".join(f"\n    {line[:160]}" for line in left))


if __name__ == "__main__":
    main()
