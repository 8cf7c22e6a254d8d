"""Reading what ranks wrote, as a judge must: plain files only, capped, never followed links.

Everything in a launch's work directory was written by the submission's ranks, which may
have replaced a file with a link to something only the grader can read, written a file of
gigabytes, a deflated archive that inflates to gigabytes, JSON nested a million deep, or bytes
that are not text. So every read here goes through the directory's own descriptor (a rank
that renames the directory changes nothing), refuses links and anything but a regular file,
reads at most a fixed number of bytes (text keeps its head and its tail), inflates no more
than it would read, and parses into plain values of bounded depth, or nothing.

The grader creates directories there only through a descriptor of their parent, under a name
no rank could have guessed, and removes a tree (``remove_tree``) by descriptor, whatever its depth.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import secrets
import stat
import zipfile
import zlib
from pathlib import Path

TEXT_HEAD = 8_000  # characters of a log kept from its start ...
TEXT_TAIL = 16_000  # ... and from its end
EVENTS_LIMIT = 32 << 20  # bytes of one rank's events read at most
LINE_LIMIT = 1 << 20  # bytes of one event
DEPTH_LIMIT = 32  # levels of nesting of any JSON value kept
ARRAY_LIMIT = 256 << 20  # bytes of the arrays of one file, once inflated
ARRAYS_IN_ARCHIVE = 4000


class Folder:
    """A directory, held by a descriptor: every name in it is looked up from there, links refused."""

    def __init__(self, path: Path, fd: int | None = None):
        self.path = path  # for messages only: nothing is looked up by it
        self.fd = None
        self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY) if fd is None else fd

    def sub(self, name: str) -> Folder | None:
        """The directory ``name`` in this one, as a Folder of its own; None if missing or a link."""
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError:
            return None
        return Folder(self.path / name, fd)

    def make(self, prefix: str, owner: int | None = None, *, exact: bool = False) -> tuple[str, Folder]:
        """A new directory in this one, named ``prefix-<random>`` (so no rank can have put anything where it
        goes), or ``prefix`` itself (``exact``: where no rank can have been yet), owned by ``owner`` if given;
        its name and the Folder of it."""
        while True:
            name = prefix if exact else f"{prefix}-{secrets.token_hex(4)}"
            try:
                os.mkdir(name, 0o755, dir_fd=self.fd)
                break
            except FileExistsError:
                if exact:
                    raise
        folder = self.sub(name)
        if folder is None:
            raise OSError(f"the directory {name} the grader made is gone")
        if owner is not None:
            os.fchown(folder.fd, owner, owner)
        return name, folder

    def names(self, limit: int = 10_000) -> list[str]:
        """The names in this directory (at most ``limit``), sorted."""
        try:
            with os.scandir(self.fd) as entries:
                found = []
                for entry in entries:
                    found.append(entry.name)
                    if len(found) >= limit:
                        break
        except OSError:
            return []
        return sorted(found)

    def listing(self, limit: int = 1000) -> dict[str, int]:
        """Names and sizes of the regular files in this directory, links not followed."""
        found = {}
        for name in self.names(limit):
            try:
                info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found[name] = info.st_size
        return found

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
        return None if data is None else parse_json(data)

    def read_array(self, name: str, limit: int = ARRAY_LIMIT):
        """A NumPy .npy file of numbers, or an .npz archive of them (name -> array), never pickled
        objects; None if it is anything else, or would take more than ``limit`` bytes."""
        data = self.read_bytes(name, limit)
        if data is None:
            return None
        if data[:4] == b"PK\x03\x04":
            return _archive(data, limit)
        return _array(data)

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self):
        self.close()


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
            event = parse_json(line)
            if _well_formed(event):
                events.append(event)
        return events

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def parse_json(data: bytes):
    """Plain JSON values nested at most DEPTH_LIMIT deep, or None: never an exception."""
    try:
        value = json.loads(data)
    except (ValueError, RecursionError, MemoryError):
        return None
    return value if _shallow(value) else None


def _shallow(value) -> bool:
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth >= DEPTH_LIMIT:
                return False
            stack += [(v, depth + 1) for v in (item.values() if isinstance(item, dict) else item)]
    return True


# The fields every check, diagnosis and timeline reads from an event, with the types they must have.
_FIELDS = {"kind": str, "t": (int, float), "seq": int, "n": int, "call": str, "op": str, "caller": (str, type(None)),
           "index": (int, str, type(None)), "error": (str, type(None))}


def _well_formed(event) -> bool:
    """An event whose common fields have their types (a string time stamp would crash the timeline)."""
    if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
        return False
    for name, kind in _FIELDS.items():
        value = event.get(name)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            return False
    t = event.get("t")
    return t is None or math.isfinite(t)


def _array(data: bytes):
    """The array of an .npy file's bytes, its size checked against its header before anything is made of it."""
    import numpy as np

    f = io.BytesIO(data)
    try:
        major, _ = np.lib.format.read_magic(f)
        header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = header(f)
    except (ValueError, OSError, EOFError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if dtype.hasobject or dtype.kind not in "fiu" or not all(isinstance(d, int) and d >= 0 for d in shape):
        return None
    count = math.prod(shape)
    if count * dtype.itemsize != len(data) - f.tell():
        return None  # a header that claims more (or less) than the file holds
    array = np.frombuffer(data, dtype=dtype, count=count, offset=f.tell())
    return array.reshape(shape, order="F" if fortran else "C").copy()  # writable, as torch.from_numpy wants


def _archive(data: bytes, limit: int):
    """The arrays of an .npz archive's bytes, inflating no more than ``limit`` bytes in all."""
    found, left = {}, limit
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist()[:ARRAYS_IN_ARCHIVE]:
                with archive.open(info) as member:
                    raw = member.read(left + 1)
                left -= len(raw)
                if left < 0:
                    return None
                array = _array(raw)
                if array is not None and info.filename.endswith(".npy"):
                    found[info.filename.removesuffix(".npy")] = array
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError, zlib.error):
        return None
    return found


def remove_tree(path: Path):
    """Remove a directory, whatever was made of it: links (never followed, only removed), any depth,
    any permissions."""
    try:
        parent = Folder(path.parent)
    except OSError:
        return
    try:
        remove_in(parent, path.name)
    finally:
        parent.close()


def gone(name: str, prefix: str) -> bool:
    """Whether the process whose pid follows ``prefix`` in ``name`` (``<prefix><pid>-...``) has ended."""
    try:
        os.kill(int(name.removeprefix(prefix).split("-")[0]), 0)
    except ProcessLookupError:
        return True
    except (ValueError, OSError):
        return False
    return False


def remove_stale(parent: Path, prefix: str):
    """What graders that are gone left in ``parent`` (killed before they could remove it), named
    ``<prefix><pid>-...``."""
    for path in parent.glob(f"{prefix}*"):
        if gone(path.name, prefix):
            remove_tree(path)


def remove_in(folder: Folder, name: str):
    """Remove ``name`` from ``folder``: a file, a link (never followed), or a directory of any depth and
    any permissions."""
    top = _open_dir(folder.fd, name)
    if top is None:
        _unlink(name, folder.fd)
        return
    try:
        _empty(top)
    finally:
        os.close(top)
    try:
        os.rmdir(name, dir_fd=folder.fd)
    except OSError:
        pass


def empty(folder: Folder, keep: frozenset[str] = frozenset()):
    """Everything in ``folder`` removed but the names in ``keep``, the folder kept."""
    _empty(folder.fd, keep)


def _empty(top: int, keep: frozenset[str] = frozenset()):
    """Iterative, one descriptor at a time: every directory found is first moved up to the top with a
    name of its own, then emptied and removed."""
    pending: list[str | None] = [None]
    while pending:
        name = pending.pop()
        here = top if name is None else _open_dir(top, name)
        if here is None:
            continue
        try:
            for entry in _entries(here):
                if here == top and entry in keep:
                    continue
                if _is_dir(here, entry):
                    moved = _move_up(here, entry, top)
                    if moved:
                        pending.append(moved)
                else:
                    _unlink(entry, here)
        finally:
            if here != top:
                os.close(here)
        if name is not None:
            try:
                os.rmdir(name, dir_fd=top)
            except OSError:
                pass


def _move_up(parent: int, name: str, top: int) -> str | None:
    """Directory ``name`` moved from ``parent`` into ``top`` under a new name (moving a directory needs
    write permission on it, which a rank may have taken away)."""
    moved = f".gone-{secrets.token_hex(8)}"
    for attempt in range(2):
        try:
            os.rename(name, moved, src_dir_fd=parent, dst_dir_fd=top)
            return moved
        except PermissionError:
            _chmod(parent, name)
            try:
                os.fchmod(parent, 0o700)  # moving out of it writes it too
            except OSError:
                pass
        except OSError:
            return None
    return None


def _open_dir(parent: int, name: str) -> int | None:
    for attempt in range(2):
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except PermissionError:
            _chmod(parent, name)
        except OSError:
            return None
    return None


def _entries(fd: int) -> list[str]:
    try:
        return os.listdir(fd)
    except PermissionError:
        try:
            os.fchmod(fd, 0o700)
            return os.listdir(fd)
        except OSError:
            return []
    except OSError:
        return []


def _is_dir(parent: int, name: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _chmod(parent: int, name: str):
    """Give the directory ``name`` back to its owner (0700), through a descriptor of it: never a link's target."""
    try:
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return
    try:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            os.chmod(f"/proc/self/fd/{fd}", 0o700)
    except OSError:
        pass
    finally:
        os.close(fd)


def _unlink(name: str, parent: int):
    try:
        os.unlink(name, dir_fd=parent)
    except PermissionError:
        try:
            os.fchmod(parent, 0o700)
            os.unlink(name, dir_fd=parent)
        except OSError:
            pass
    except OSError:
        pass


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
