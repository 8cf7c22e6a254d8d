"""``python -m autograder``: the command line (cli.py).

Grading needs torch. A Python without it (the system's python3 instead of the course's
.venv/bin/python, the usual slip) gets one line saying what to run instead, and exit status 2,
not a traceback. ``list`` and ``--help`` need no torch, so they work anywhere.
"""

from __future__ import annotations  # a system python3 may be older than the course's 3.10

import importlib.util
import shlex
import sys
from pathlib import Path

NEEDS_TORCH = ("grade", "serve")


def _missing_torch(argv: list[str]) -> str | None:
    """What to tell the user when the command needs torch and this Python lacks it, else None."""
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in NEEDS_TORCH or "-h" in argv or "--help" in argv:
        return None
    if importlib.util.find_spec("torch") is not None:  # finds it without importing it
        return None
    root = Path(__file__).resolve().parent.parent  # the clone: the course is installed in editable mode
    venv_python = ".venv/bin/python" if root == Path.cwd().resolve() else str(root / ".venv" / "bin" / "python")
    todo = "use" if (root / ".venv" / "bin" / "python").exists() else "run `bash scripts/setup.sh`, then use"
    return (f"autograder: torch is not installed for {sys.executable}: {todo} the course's Python, "
            f"`{venv_python} -m autograder {shlex.join(argv)}`")


problem = _missing_torch(sys.argv[1:])
if problem:
    print(problem, file=sys.stderr)
    sys.exit(2)

from autograder.cli import main  # noqa: E402 (after the check: cli imports nothing heavy, grading does)

sys.exit(main())
