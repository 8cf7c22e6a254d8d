"""How often a DDP script aborts at exit under plain torchrun, by how it ends. Prints figures; asserts nothing.

    python benchmarks/teardown.py [--runs 40] [--processes 3]

PyTorch 2.13's gloo can abort a rank after all its work is done ("terminate called without an active
exception", SIGABRT) when the DDP model is freed only by the interpreter's last garbage collection,
after destroy_process_group. Three endings of one script (2.2's, as tests/submissions/ex2_2 holds it):
as written, `del model` first, and `del model; gc.collect()` first, which lesson 2 teaches.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "submissions" / "ex2_2" / "correct_tutorial.py"
END = "    dist.destroy_process_group()\n"
ENDINGS = {
    "as written (the DDP model freed at exit)": END,
    "del model, then destroy": "    del model\n" + END,
    "del model; gc.collect(), then destroy": "    del model\n    import gc\n    gc.collect()\n" + END,
}
ABORT = "terminate called without an active exception"


def run(script: Path, processes: int, where: Path) -> str:
    """'ok', 'abort' (the teardown race) or 'other'."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}",
               str(script)]
    out = subprocess.run(command, cwd=where, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    if out.returncode == 0:
        return "ok"
    return "abort" if ABORT in out.stderr + out.stdout else "other"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--processes", type=int, default=3)
    args = parser.parse_args()
    text = SCRIPT.read_text()
    assert text.count(END) == 1, f"{SCRIPT.name} no longer ends with one destroy_process_group()"
    print(f"{args.runs} runs of {SCRIPT.name} under torchrun --standalone --nproc-per-node={args.processes}")
    with tempfile.TemporaryDirectory() as folder:
        where = Path(folder)
        for name, ending in ENDINGS.items():
            script = where / "train.py"
            script.write_text(text.replace(END, ending))
            seen = [run(script, args.processes, where) for _ in range(args.runs)]
            print(f"  {name:45s} aborted at exit {seen.count('abort'):3d}/{args.runs}, "
                  f"other failures {seen.count('other')}")


if __name__ == "__main__":
    main()
