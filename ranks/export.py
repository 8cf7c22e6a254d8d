"""A checkpoint a rank saved, read back by the rank host as plain data for the grader.

The file was written by the submission, so before ``torch.load(weights_only=True)`` reads it, it
must be a regular file inside the launch's work tree (no link out of it, no device, no pipe), no
larger than the limit, in torch.save's zip format, and the sizes its records claim (which bound what
loading allocates) must add up to no more than the limit either: a small file cannot inflate into
gigabytes here.
"""

from __future__ import annotations

import os
import stat
import zipfile
from pathlib import Path

FILE_LIMIT = 256 << 20  # bytes of a checkpoint read at most
INFLATED_LIMIT = 512 << 20  # bytes its records may hold once inflated
RECORDS_LIMIT = 10_000
NAMES_LIMIT = 1000  # names of one checkpoint exported
DEPTH_LIMIT = 8  # levels of nesting walked: "optimizer.state.0.exp_avg" is three
VALUE_CHARS = 200  # characters of one exported value's text


def export(path: str, out: Path, within: list[str] | None = None) -> dict:
    """A checkpoint as plain data: ``out`` (.npz) holds its floating-point tensors; the answer says what
    it held. A nested checkpoint ({"model": ..., "optimizer": {"state": {0: ...}}}) is flattened to
    dotted names ("optimizer.state.0.exp_avg"); its other leaves (numbers, strings, lists of them)
    come back as ``values``. ``within``: the directories the file may lie in, links resolved."""
    import numpy as np
    import torch

    opened = _open(path, within)
    if isinstance(opened, dict):
        return opened
    with opened as f:
        try:
            state = torch.load(f, map_location="cpu", weights_only=True)
        except Exception as exc:
            return {"error": f"unreadable: {type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
    if not isinstance(state, dict):
        return {"type": type(state).__name__}
    tensors, values = {}, {}
    _flatten(state, "", tensors, values)
    names = list(tensors)[:NAMES_LIMIT]
    np.savez(out, **{f"a{i}": tensors[n].detach().double().numpy() for i, n in enumerate(names)})
    return {"type": "dict", "keys": [str(k)[:VALUE_CHARS] for k in state][:NAMES_LIMIT], "tensors": names,
            "values": dict(list(values.items())[:NAMES_LIMIT])}


def _open(path: str, within: list[str] | None):
    """The checkpoint, opened, once it is safe to load; else the answer saying why it is not read."""
    real = os.path.realpath(path)
    if within is not None and not any(os.path.commonpath([real, os.path.realpath(w)]) == os.path.realpath(w)
                                      for w in within):
        return {"error": f"unreadable: it lies outside the directories a rank writes in ({', '.join(within)})"}
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return {"error": "missing"}
    except OSError as exc:
        return {"error": f"unreadable: {exc.strerror}"}
    f = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "it is not a regular file"
    elif info.st_size > FILE_LIMIT:
        problem = f"it holds {info.st_size} bytes, more than {FILE_LIMIT >> 20} MB"
    else:
        problem = _zip_problem(f)
    if problem:
        f.close()
        return {"error": f"unreadable: {problem}"}
    f.seek(0)
    return f


def _zip_problem(f) -> str | None:
    try:
        with zipfile.ZipFile(f) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return "not in torch.save's zip format (save with torch.save's defaults)"
    if len(records) > RECORDS_LIMIT:
        return f"it holds {len(records)} records"
    inflated = sum(r.file_size for r in records)
    if inflated > INFLATED_LIMIT:
        return f"its records would inflate to {inflated} bytes, more than {INFLATED_LIMIT >> 20} MB"
    return None


def _flatten(value, prefix: str, tensors: dict, values: dict):
    import torch

    from ranks.trace import plain

    if len(tensors) + len(values) >= NAMES_LIMIT:
        return
    if prefix.count(".") >= DEPTH_LIMIT and isinstance(value, (dict, list, tuple)):
        values[prefix] = f"<{type(value).__name__} nested deeper than {DEPTH_LIMIT}>"  # not walked, not repr'd
        return
    if type(value).__name__ == "DTensor":  # one rank's shard of a distributed tensor: said, not read
        local = getattr(value, "_local_tensor", None)
        values[prefix] = {"DTensor": list(value.shape), "local": list(local.shape) if local is not None else None}
        return
    if isinstance(value, torch.Tensor):
        if value.dtype.is_floating_point:
            tensors[prefix] = value
        elif value.numel() == 1 and not value.dtype.is_complex and value.dtype != torch.bool:
            values[prefix] = int(value.item())  # a count kept as a tensor (a step, an epoch): a number
        return
    if isinstance(value, dict):
        for key, item in list(value.items())[:NAMES_LIMIT]:
            _flatten(item, f"{prefix}.{str(key)[:VALUE_CHARS]}" if prefix else str(key)[:VALUE_CHARS], tensors, values)
        return
    if isinstance(value, (list, tuple)) and any(isinstance(v, (dict, list, tuple, torch.Tensor)) for v in value):
        for k, item in enumerate(value[:NAMES_LIMIT]):
            _flatten(item, f"{prefix}.{k}", tensors, values)
        return
    shown = plain(value)
    values[prefix] = shown[:VALUE_CHARS] if isinstance(shown, str) else _short(shown)


def _short(value):
    """A plain value kept small: lists of at most 16 items, strings of at most VALUE_CHARS characters."""
    if isinstance(value, list):
        return [_short(v) for v in value[:16]]
    if isinstance(value, dict):
        return {str(k)[:VALUE_CHARS]: _short(v) for k, v in list(value.items())[:16]}
    return value[:VALUE_CHARS] if isinstance(value, str) else value
