"""Streaming with `datasets` in a command: cleanly ended, and without torch.

A streamed `load_dataset` reads Parquet through pyarrow's dataset scanner, whose C++ threads
belong to its iterators. If those iterators are only freed during interpreter teardown, after
Arrow's own runtime is gone, the process can abort at exit ("terminate called without an active
exception", exit 134: apache/arrow#45214, huggingface/datasets#7566), after its work is done.
Collecting them before the command returns joins the threads while Arrow is still alive.

Only a command that streamed collects: a full collection costs ~0.2 s in a process with a large
heap, and a program calling a CLI's `main` once per file would pay it every call.

Where torch is installed, every streamed `load_dataset` imports it (to share the epoch with torch's
data-loader workers): 4-7 s of a small CPU's time for a command that never hands a row to torch.
"""

from __future__ import annotations

import gc
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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


class _NoTorch:
    """A finder first in ``sys.meta_path``: an import of torch raises ModuleNotFoundError, as where it
    is not installed."""

    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r} (atari-data leaves torch unimported here)", name=name)
        return None


_NO_TORCH = _NoTorch()
_hiding = threading.Lock()
_depth = 0  # open without_torch() scopes that hide it (threads share what is hidden: one process, one torch)
_had: set[str] = set()  # the webdataset modules imported before the first of them began


@contextmanager
def without_torch() -> Iterator[None]:
    """Inside, torch is hidden from the whole process (every thread), unless it is not installed or
    already imported (then this changes nothing, and a caller may hand rows to it): `datasets` keeps
    an int epoch and webdataset binds its own stand-ins for torch's classes. When the last scope
    open ends, webdataset first imported inside is dropped from ``sys.modules``, so an import after
    (a caller's, with torch) binds torch's."""
    global _depth, _had
    from datasets import config

    with _hiding:
        hide = _depth > 0 or (config.TORCH_AVAILABLE and "torch" not in sys.modules)
        if hide:
            if _depth == 0:
                sys.meta_path.insert(0, _NO_TORCH)
                _had = _webdataset_modules()
                config.TORCH_AVAILABLE = False  # it was True: hiding starts only then
            _depth += 1
    try:
        yield
    finally:
        if hide:
            with _hiding:
                _depth -= 1
                if _depth == 0:
                    config.TORCH_AVAILABLE = True
                    with suppress(ValueError):  # taken out by someone else
                        sys.meta_path.remove(_NO_TORCH)
                    for name in _webdataset_modules() - _had:
                        del sys.modules[name]


def _webdataset_modules() -> set[str]:
    return {name for name in sys.modules if name.partition(".")[0] == "webdataset"}
