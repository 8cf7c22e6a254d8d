"""Negative controls written as a correct solution plus the one small edit that is the mistake.

A folder's ``mistakes.py`` names its correct ``BASE`` file and, for each mistake, what it does
and its edits (and, third, another correct file to edit, if not BASE): (text found exactly once in the base, what replaces it). A reader sees the
mistake in a line, and a fix to the correct solution reaches every control made from it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def mistakes(folder: Path) -> dict:
    """name -> (what it does, edits) for the controls written as edits in ``folder``; {} if none."""
    path = folder / "mistakes.py"
    if not path.exists():
        return {}
    spec = importlib.util.spec_from_file_location(f"mistakes_{folder.name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: (doc, edits, folder / (base[0] if base else module.BASE))
            for name, (doc, edits, *base) in module.MISTAKES.items()}


def write(folder: Path, name: str, dest: Path) -> Path:
    """The control ``name`` of ``folder`` as a whole file in ``dest``."""
    doc, edits, base = mistakes(folder)[name]
    text = base.read_text()
    for old, new in edits:
        assert text.count(old) == 1, f"{base.name} no longer holds exactly one {old!r}: update {name}"
        text = text.replace(old, new)
    path = dest / f"{name}.py"
    path.write_text(f"# {doc}\n{text}")
    return path
