"""Reading a file a user hands us, the same way in every package: only a regular file, never more
than a cap, and JSON only as plain JSON.

A FIFO would hold ``open()`` until a writer came, and a device reads on without end, so a file is
opened non-blocking and refused by its kind before a byte is read. Each package words a
:class:`Refused` as its own one-line error, naming the file.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

#: What a file read with ``follow`` False was refused for.
LINK = "a symbolic link"


class Refused(ValueError):
    """Why a file was not read, a phrase to follow its name (``size``: the bytes found, when it was
    refused for its size)."""

    def __init__(self, why: str, size: int | None = None):
        super().__init__(why)
        self.size = size


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading, unbuffered, when it is a regular file; anything else is refused.
    A link is followed (a Hub snapshot is links into its blobs). OSError as ``os.open`` raises it."""
    fd, _ = _open_regular_fd(path)
    return open(fd, "rb", buffering=0)


def _open_regular_fd(path: str | os.PathLike, follow: bool = True) -> tuple[int, int]:
    """(descriptor, size) of a regular file opened for reading; with ``follow`` False a link in the
    name's last part is refused by the same open that reads it (no check-then-open race)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (0 if follow else os.O_NOFOLLOW))
    except OSError as e:
        if not follow and e.errno == errno.ELOOP:
            raise Refused(LINK) from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Refused("not a regular file: a device, pipe or socket?")
    return fd, st.st_size


def read_capped(path: str | os.PathLike, cap: int, follow: bool = True) -> bytes:
    """A whole regular file of at most ``cap`` bytes, refused by its size before it is read. At most
    ``cap + 1`` bytes are read whatever the file does meanwhile (one that grows, or says 0 as /proc
    does, is read on up to the cap). ``follow`` False refuses a symbolic link."""
    fd, size = _open_regular_fd(path, follow)  # a bare descriptor: a file object costs a third again on a small frame
    try:
        if size > cap:
            raise Refused(f"{size:,} bytes, over the {_mb(cap)} it may be", size)
        chunks, total, want = [], 0, size + 1  # sized reads: no cap-sized buffer for a small file
        while total <= cap:
            chunk = os.read(fd, min(want, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total, want = total + len(chunk), 1 << 20
    finally:
        os.close(fd)
    if total > cap:
        raise Refused(f"over the {_mb(cap)} it may be", total)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.0f} MB" if n >= 1 << 20 else f"{n:,} bytes"


class _Repeated(ValueError):
    pass


def _no_repeats(pairs: list) -> dict:
    seen = dict(pairs)
    if len(seen) != len(pairs):  # readers disagree on which of two values counts: refused, not read one way
        keys: set = set()
        for k, _ in pairs:
            if k in keys:
                raise _Repeated(f"key {k!r} given twice in one object")
            keys.add(k)
    return seen


def parse_json(data: bytes):
    """The JSON value in ``data``: UTF-8, no key twice in one object; any defect is :class:`Refused`."""
    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_repeats)
    except UnicodeDecodeError as e:
        raise Refused(f"not UTF-8 at byte {e.start}") from None
    except _Repeated as e:
        raise Refused(str(e)) from None
    except (ValueError, RecursionError) as e:  # not JSON, a number past 4,300 digits, nested too deep
        raise Refused(f"not JSON: {str(e)[:120] or type(e).__name__}") from None


class NotStandard(ValueError):
    """NaN, Infinity or a number past a float's range: Python's json reads them, strict readers do not;
    and a key given twice in one object, which readers take one way or another."""


def _refuse_constant(name: str):
    raise NotStandard(f"{name} is not standard JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotStandard(f"{text} is not standard JSON (past a float's range)")
    return value


def loads_standard(text: str | bytes):
    """``json.loads`` refusing what strict readers refuse (NaN, Infinity, 1e999) or read their own way (a
    key twice) with :class:`NotStandard`; for what a stranger sends that the judge writes back (answers)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant, parse_float=_finite, object_pairs_hook=_no_repeats)
    except _Repeated as e:
        raise NotStandard(str(e)) from None


@contextmanager
def writing(path: str | os.PathLike, foreign: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Name ``path`` in an OSError raised while it is written: a write's own error (a full disk, a
    file-size limit) names no file, and a one-line error must. A library that reports a failed write
    as an error of its own (``foreign``: safetensors', torch's zip writer's) gives an OSError naming
    ``path`` too, with the system's words when its error came from an OSError."""
    try:
        yield
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None
    except foreign as e:
        under = e.__context__
        why = under.strerror if isinstance(under, OSError) and under.strerror else str(e).splitlines()[0][:200]
        raise OSError(errno.EIO, f"cannot be written ({why})", str(path)) from None


def write_file(path: str | os.PathLike, data: bytes | str, sync: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` as one file, naming ``path`` in an OSError
    (:func:`writing`); with ``sync``, on the disk before this returns."""
    with writing(path), open(path, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def file_above(path: str | os.PathLike) -> Path | None:
    """The first of ``path``'s existing parents, where it is not a folder (a file where one must be
    made: mkdir says only 'File exists'); None when that parent is a folder."""
    for above in Path(path).parents:
        if above.exists() or above.is_symlink():
            return None if above.is_dir() else above
    return None
