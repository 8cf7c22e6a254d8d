"""The student's code for one exercise, from a .py file or from a notebook's exercise cell.

In a notebook the exercise cell starts with the line ``%%exercise 2.2``. The cell is
copied into a module of its own (that line commented out, so line numbers match the
cell's); the student's files are only read, never written.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

MAGIC = "%%exercise"
STUDENT_MODULE = "student.py"  # where write_module() writes the code; reports call it "exercise cell"


class UsageError(Exception):
    """Bad input from the user: the message says what to do."""


def magic_id(cell_source: str) -> str | None:
    first = cell_source.lstrip().splitlines()[0] if cell_source.strip() else ""
    parts = first.split()
    return parts[1] if len(parts) >= 2 and parts[0] == MAGIC else None


def code_cells(text: str) -> list[str]:
    """The sources of a notebook's code cells, read as the JSON it is (nbformat's schema checks cost seconds)."""
    try:
        nb = json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to be a notebook") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("no list of cells")
    sources = []
    for cell in nb["cells"]:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            sources.append("".join(source) if isinstance(source, list) else str(source))
    return sources


def exercises_in(path: Path, known: list[str]) -> list[str]:
    """The known exercises that ``path`` (a notebook) has a cell for, in the course's order."""
    path = Path(path)
    if path.suffix != ".ipynb" or not path.is_file():
        raise UsageError(f"`grade all` grades a notebook: {path} is not one")
    try:
        found = {magic_id(source) for source in code_cells(path.read_text(encoding="utf-8"))}
    except (ValueError, TypeError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read {path} as a notebook ({exc.__class__.__name__}: {exc})") from None
    ids = [i for i in known if i in found]
    if not ids:
        raise UsageError(f"{path} has no exercise cell: an exercise cell's first line is `{MAGIC} N.M`")
    return ids


def cell_from_notebook(path: Path, exercise_id: str) -> str:
    try:
        sources = code_cells(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"cannot read {path} as a notebook ({exc.__class__.__name__}: {exc})") from None
    for source in sources:
        if magic_id(source) == exercise_id:
            return source
    raise UsageError(f"{path} has no cell for exercise {exercise_id}: its first line must be `{MAGIC} {exercise_id}`")


def cells_of(path: Path, exercise_ids) -> dict[str, str]:
    """The code of each of those exercises whose cell the notebook at ``path`` has; none from a .py file."""
    if not exercise_ids or path.suffix != ".ipynb":
        return {}
    try:
        sources = code_cells(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, TypeError, UnicodeDecodeError):
        return {}
    found = {}
    for source in sources:
        exercise_id = magic_id(source)
        if exercise_id in exercise_ids and exercise_id not in found:
            found[exercise_id] = as_module(source)
    return found


def as_notebook(sources: list[str]) -> str:
    """Exercise cells (each starting with its magic line) as a notebook of their own, for the grader: an
    exercise that also runs others' cells (Exercise.uses) finds them there (``cells_of``)."""
    cells = [{"cell_type": "code", "metadata": {}, "source": source} for source in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def as_module(cell_source: str) -> str:
    lines = cell_source.splitlines()
    for i, line in enumerate(lines):
        if line.strip().startswith(MAGIC):
            lines[i] = "# " + line.strip()
            break
    return "\n".join(lines) + "\n"


SIZE_LIMIT = 1 << 20  # bytes: an exercise is a cell or a short script


def read_exercise(path: Path, exercise_id: str) -> str:
    """The exercise's code, from a .py file or a notebook; a UsageError says what is wrong with the file."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    if path.suffix not in (".ipynb", ".py"):
        raise UsageError(f"{path}: give a .py file or a .ipynb notebook")
    if path.stat().st_size > (64 * SIZE_LIMIT if path.suffix == ".ipynb" else SIZE_LIMIT):
        raise UsageError(f"{path} is too large to be an exercise ({path.stat().st_size} bytes)")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text: save it as UTF-8 (is it the right file?)") from None
    if "\0" in text:
        raise UsageError(f"{path} holds binary data, not Python code: is it the right file?")
    return as_module(cell_from_notebook(path, exercise_id) if path.suffix == ".ipynb" else text)


def write_module(code: str, dest: Path, name: str = STUDENT_MODULE) -> Path:
    """Write the exercise's code to ``dest/name`` (the grader's directory, which the ranks read) and return that path."""
    target = dest / name
    target.write_text(code)
    target.chmod(0o644)
    return target


def parse(code: str, filename: str = "exercise cell") -> ast.Module:
    """The code's syntax tree; a SyntaxError for any code Python's parser cannot take, however it fails
    (nesting too deep for the parser, a null byte, no memory left)."""
    try:
        return ast.parse(code, filename=filename)
    except SyntaxError:
        raise
    except (RecursionError, MemoryError, ValueError) as exc:
        error = SyntaxError("the code is nested too deeply, or too large, for Python to read"
                            if not isinstance(exc, ValueError) else str(exc))
        raise error from None


def as_handed_out(code: str) -> bool:
    """The cell holds nothing but ``raise NotImplementedError()``: the student has not begun."""
    try:
        body = parse(code).body
    except SyntaxError:
        return False
    return (len(body) == 1 and isinstance(body[0], ast.Raise) and body[0].exc is not None
            and "NotImplementedError" in ast.unparse(body[0].exc))


def compile_problem(code: str, entry: str | tuple[str, ...] | None) -> str | None:
    """Why the code cannot run at all (a syntax error, a missing function), or None."""
    try:
        tree = parse(code)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "somewhere"
        shown = f"\n    {exc.text.rstrip()}" if exc.text else ""
        return f"Your code does not compile: {exc.msg} at {where}.{shown}\nThe graded cell must be plain Python (no ! or % lines but the first)."
    missing = [name for name in ((entry,) if isinstance(entry, str) else entry or ()) if name not in _top_level_names(tree)]
    if missing:
        entry = missing[0]
        what = "a function named" if entry.islower() else "a class named" if entry[:1].isupper() and not entry.isupper() \
            else "a variable named"
        return f"The cell must define {what} `{entry}` at the top level; none was found."
    return None


def _top_level_names(tree: ast.Module) -> set[str]:
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names
