"""Reading what ranks wrote, as a judge must: plain files only, capped, never followed links.

Everything in a launch's work directory was written by the submission's ranks, which may
have replaced a file with a link to something only the grader can read, written a file of
gigabytes, or written bytes that are not text. So every read here goes through the
directory's own descriptor (a rank that renames the directory changes nothing), refuses
links and anything but a regular file, and reads at most a fixed number of bytes:
text keeps its head and its tail.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

TEXT_HEAD = 8_000  # characters of a log kept from its start ...
TEXT_TAIL = 16_000  # ... and from its end
EVENTS_LIMIT = 32 << 20  # bytes of one rank's events read at most
LINE_LIMIT = 1 << 20  # bytes of one event


class Folder:
    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)

    def sub(self, name: str) -> Folder | None:
        """The directory ``name`` in this one, as a Folder of its own; None if missing or a link."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError:
            return None
        folder = Folder.__new__(Folder)
        folder.path, folder.fd = self.path / name, fd
        return folder

    def has(self, name: str) -> bool:
        """Whether an entry ``name`` (of any kind) is in this directory."""
        try:
            os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except OSError:
            return False
        return True

    def open(self, name: str) -> int | None:
        """A descriptor for the regular file ``name``, or None (missing, a link, a device, ...)."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=self.fd)
        except OSError:
            return None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def read_bytes(self, name: str, limit: int) -> bytes | None:
        """The file's bytes, or None when it is missing, not a plain file, or larger than ``limit``."""
        fd = self.open(name)
        if fd is None:
            return None
        try:
            if os.fstat(fd).st_size > limit:
                return None
            return _read(fd, limit + 1)[:limit]
        finally:
            os.close(fd)

    def read_text(self, name: str) -> str:
        """A log: its head and its tail, with what was left out said in the middle."""
        fd = self.open(name)
        if fd is None:
            return ""
        try:
            size = os.fstat(fd).st_size
            if size <= TEXT_HEAD + TEXT_TAIL:
                return _clip_lines(_read(fd, size).decode(errors="replace"))
            head = _read(fd, TEXT_HEAD).decode(errors="replace")
            os.lseek(fd, size - TEXT_TAIL, os.SEEK_SET)
            tail = _read(fd, TEXT_TAIL).decode(errors="replace")
            return _clip_lines(f"{head}\n[... {size - TEXT_HEAD - TEXT_TAIL} bytes left out ...]\n{tail}")
        finally:
            os.close(fd)

    def read_json(self, name: str, limit: int = 16 << 20):
        data = self.read_bytes(name, limit)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return None

    def read_array(self, name: str, limit: int = 256 << 20):
        """A NumPy .npy file of numbers, never pickled objects; None if it is anything else."""
        import io

        import numpy as np

        data = self.read_bytes(name, limit)
        if data is None:
            return None
        try:
            array = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError):
            return None
        if isinstance(array, np.ndarray):
            return array if array.dtype.kind in "fiu" else None
        return {k: array[k] for k in array.files if array[k].dtype.kind in "fiu"}  # an .npz archive

    def close(self):
        os.close(self.fd)


class Tail:
    """The complete JSON lines added to a file since the last read."""

    def __init__(self, folder: Folder, name: str):
        self.folder, self.name = folder, name
        self.fd: int | None = None
        self.offset = 0
        self.partial = b""
        self.overflow = False  # the rank wrote more than EVENTS_LIMIT: the rest is ignored
        self.digest = hashlib.sha256()  # of the bytes read: the rank's recorder says what it wrote

    def read(self) -> list[dict]:
        if self.fd is None:
            self.fd = self.folder.open(self.name)
            if self.fd is None:
                return []
        if self.overflow:
            return []
        chunk = os.pread(self.fd, min(1 << 20, EVENTS_LIMIT - self.offset), self.offset)
        self.offset += len(chunk)
        self.digest.update(chunk)
        if self.offset >= EVENTS_LIMIT:
            self.overflow = True
        lines = (self.partial + chunk).split(b"\n")
        self.partial = lines.pop()
        if len(self.partial) > LINE_LIMIT:
            self.partial = b""
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and isinstance(event.get("kind"), str):
                events.append(event)
        return events

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def _read(fd: int, size: int) -> bytes:
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _clip_lines(text: str, width: int = 2000) -> str:
    """One enormous line (a printed tensor of a million numbers) is cut to ``width`` characters."""
    return "\n".join(line if len(line) <= width else line[:width] + f" [... {len(line) - width} characters]"
                     for line in text.split("\n"))
