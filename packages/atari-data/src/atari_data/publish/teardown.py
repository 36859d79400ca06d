"""Ending a command that streamed with `datasets` cleanly.

A streamed `load_dataset` reads Parquet through pyarrow's dataset scanner, whose C++ threads
belong to its iterators. If those iterators are only freed during interpreter teardown, after
Arrow's own runtime is gone, the process can abort at exit ("terminate called without an active
exception", exit 134: apache/arrow#45214, huggingface/datasets#7566), after its work is done.
Collecting them before the command returns joins the threads while Arrow is still alive.
"""

from __future__ import annotations

import gc
import sys


def release_arrow_threads() -> None:
    """Free unreachable streaming readers now, if pyarrow was ever loaded."""
    if "pyarrow" in sys.modules:
        gc.collect()
