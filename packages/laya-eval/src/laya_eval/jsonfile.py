"""The judge's files: reading the JSON a user hands it (results files, dataset meta.json), refusing
anything that is not plain, bounded JSON with one line; and writing its outputs whole."""

from __future__ import annotations

import glob
import math
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from laya_eval.errors import EvalError
from laya_protocol.errors import signals_held
from laya_protocol.files import NotStandard, Refused, loads_standard, parse_json, read_capped

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


#: The largest magnitude a number in a file the judge reads may have: its sums and squares over any
#: number of episodes stay finite (1e308 made report draw inf [nan, nan]).
MAGNITUDE = 1e18
#: The largest magnitude of a score or a baseline: far past any game's (Atari's highest are millions),
#: so that a normalised score, over an expert-random spread of at least MIN_SPREAD, is within MAGNITUDE.
SCORE_LIMIT = 1e9


def json_flag(text: str):
    """A flag's JSON value (``--policy-kwargs``), for argparse: what is not JSON, nested past the
    parser included (a RecursionError traceback), or not standard JSON (NaN: the results would not
    be, and doom found that out only when it wrote them, every episode played) is its usage error."""
    import argparse

    try:
        value = parse_json(text.encode("utf-8", "surrogateescape"))
        loads_standard(text)  # parsed once more, strictly: flags are short
    except (Refused, NotStandard) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return value


def is_number(v, limit: float = MAGNITUDE) -> bool:
    """A finite number within ``limit`` of 0 (an integer a float holds: math.isfinite overflows on a
    400-digit one)."""
    if type(v) is int:
        return abs(v) <= min(2**53, limit)
    return type(v) is float and math.isfinite(v) and abs(v) <= limit


def numbers(v, limit: float = MAGNITUDE) -> bool:
    return isinstance(v, list) and all(is_number(x, limit) for x in v)


def replace_file(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` a file beside ``path``, then rename it over ``path``: a FIFO or link planted there is
    replaced, never written through (a FIFO would wait for a reader), and no half-written file is left.
    Call it holding the lock of what ``path`` belongs to: a staging file a kill left is removed here."""
    return put_in_place({path: stage_file(path, write)})[0]


def stage_file(path: Path, write: Callable[[Path], object]) -> Path:
    """``write`` the file that is to replace ``path`` (:func:`put_in_place`) beside it, under a name of
    its own; returns that name. Nothing is left of it if the write fails."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        if stale.is_file() and not stale.is_symlink():
            stale.unlink(missing_ok=True)
    tmp = None
    try:
        while tmp is None:  # a name of its own, made here: a fixed one could be a folder planted there
            name = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
            try:
                os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # umask applies
                tmp = name
            except FileExistsError:
                pass
        write(tmp)
    except BaseException as e:  # whatever stopped the write, no half-written file stays behind
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise EvalError(f"cannot be written ({e.strerror or type(e).__name__})", file=str(path)) from None
        raise
    return tmp


def put_in_place(staged: dict[Path, Path]) -> list[Path]:
    """Rename each staged file (:func:`stage_file`) over its path, once all are written and no path
    is a folder, with Ctrl-C and SIGTERM held: a set of files (a report's) is then replaced in a row,
    as a rename needs no room on the disk."""
    try:
        for path in staged:
            if path.is_dir() and not path.is_symlink():  # a rename over it fails: before any is made
                raise EvalError("is a folder, where a file is to be written", file=str(path))
        with signals_held():
            for path, tmp in staged.items():
                try:
                    os.replace(tmp, path)
                except OSError as e:
                    raise EvalError(f"cannot be written ({e.strerror or type(e).__name__})", file=str(path)) from None
    finally:
        for tmp in staged.values():
            tmp.unlink(missing_ok=True)  # what was not renamed
    return list(staged)
