"""Ending a command that streamed with `datasets` cleanly.

A streamed `load_dataset` reads Parquet through pyarrow's dataset scanner, whose C++ threads
belong to its iterators. If those iterators are only freed during interpreter teardown, after
Arrow's own runtime is gone, the process can abort at exit ("terminate called without an active
exception", exit 134: apache/arrow#45214, huggingface/datasets#7566), after its work is done.
Collecting them before the command returns joins the threads while Arrow is still alive.

Only a command that streamed collects: a full collection costs ~0.2 s in a process with a large
heap, and a program calling a CLI's `main` once per file would pay it every call.
"""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

_streamed = False


def streaming() -> None:
    """Say that this process is about to open a streamed `load_dataset`."""
    global _streamed
    _streamed = True


@contextmanager
def own_cache() -> Iterator[str]:
    """A `datasets` cache folder of this call's own, removed after it, for ``cache_dir``: a streamed
    read keeps only lock files there, and the user's cache (HF_HOME) may be shared with another
    run, or unusable (a home that is not there)."""
    with tempfile.TemporaryDirectory(prefix="laya-datasets-") as cache:
        yield cache


def release_arrow_threads() -> None:
    """Free unreachable streaming readers now, if one was opened since the last call."""
    global _streamed
    if _streamed:
        _streamed = False
        gc.collect()
