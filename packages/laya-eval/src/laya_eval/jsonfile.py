"""The judge's files: reading the JSON a user hands it (results files, dataset meta.json), refusing
anything that is not plain, bounded JSON with one line; and writing its outputs whole."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

from laya_eval.errors import EvalError
from laya_protocol.files import Refused, parse_json, read_capped

#: A results file of every ALE game with ten thousand episodes each is about 25 MB. Parsed JSON can take
#: some 30 times its text in memory (``[[],[],...]``), so this bounds a hostile file near 2 GB.
MAX_BYTES = 64 << 20


def read_json(path: str | Path, field: str | None = None, what: str = "valid JSON"):
    """The JSON value in ``path``, read as every package reads a file a user hands it
    (:mod:`laya_protocol.files`); any defect is one EvalError saying the file ``is not <what>`` and why."""
    try:
        return parse_json(read_capped(path, MAX_BYTES))
    except FileNotFoundError:
        raise EvalError("does not exist", file=str(path), field=field) from None
    except OSError as e:
        raise EvalError(f"is not {what} (cannot be read: {e.strerror or e})", file=str(path), field=field) from None
    except Refused as e:
        raise EvalError(f"is not {what} ({e})", file=str(path), field=field) from None


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
    except BaseException as e:  # whatever stopped the write, no half-written file stays behind
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise EvalError(f"cannot be written ({e.strerror or type(e).__name__})", file=str(path)) from None
        raise
    return path
