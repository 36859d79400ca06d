"""The judge's files: reading the JSON a user hands it (results files, dataset meta.json), refusing
anything that is not plain, bounded JSON with one line; and writing its outputs whole."""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path

from laya_eval.errors import EvalError

#: A results file of every ALE game with ten thousand episodes each is about 25 MB. Parsed JSON can take
#: some 30 times its text in memory (``[[],[],...]``), so this bounds a hostile file near 2 GB.
MAX_BYTES = 64 << 20


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


def read_json(path: str | Path, field: str | None = None, what: str = "valid JSON"):
    """The JSON value in ``path``; any defect is one EvalError saying the file ``is not <what>`` and why."""
    path = Path(path)

    def refuse(why: str) -> EvalError:
        return EvalError(f"is not {what} ({why})", file=str(path), field=field)

    try:
        # Non-blocking, so a FIFO is refused by its kind instead of waiting for a writer in open().
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as f:  # a device or pipe says nothing by its size, and may never end
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise refuse("not a regular file: a device, pipe or socket?")
            if st.st_size > MAX_BYTES:
                raise refuse(f"{st.st_size:,} bytes, over the {MAX_BYTES >> 20} MB a JSON input may be")
            data = f.read(MAX_BYTES + 1)
        if len(data) > MAX_BYTES:
            raise refuse(f"over the {MAX_BYTES >> 20} MB a JSON input may be")
        return json.loads(data.decode("utf-8"), object_pairs_hook=_no_repeats)
    except FileNotFoundError:
        raise EvalError("does not exist", file=str(path), field=field) from None
    except OSError as e:
        raise refuse(f"cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise refuse(f"not UTF-8 at byte {e.start}") from None
    except _Repeated as e:
        raise refuse(str(e)) from None
    except (ValueError, RecursionError) as e:  # not JSON, a number past 4,300 digits, nested too deep, a key twice
        raise refuse(f"not JSON: {str(e)[:120] or type(e).__name__}") from None


def is_number(v) -> bool:
    """A finite float, or an integer a float holds (math.isfinite overflows on a 400-digit one)."""
    if type(v) is int:
        return abs(v) <= 2**53
    return type(v) is float and math.isfinite(v)


def numbers(v) -> bool:
    return isinstance(v, list) and all(is_number(x) for x in v)


def replace_file(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` a file beside ``path``, then rename it over ``path``: a FIFO or link planted there is
    replaced, never written through (a FIFO would wait for a reader), and no half-written file is left."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.unlink(missing_ok=True)
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise EvalError(f"cannot be written ({e.strerror or type(e).__name__})", file=str(path)) from None
    return path
