"""A signal's disposition as the kernel holds it, read and put back whole (libc's ``sigaction``).

polars installs a SIGINT handler of its own when imported (signal-hook, with SA_RESTART), over
whatever the process had: a process that ignored Ctrl-C then caught it, the processes it started no
longer inherited the ignore, and the kernel restarted a blocking wait after that handler, so Ctrl-C
waited for the wait to end. Python's ``signal.signal`` can put back only what Python set, from the
main thread; the kernel's record, copied out and in, is whatever was there, from any thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator
from contextlib import contextmanager

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_SIZE = 256  # larger than any libc's struct sigaction (glibc's is 152 bytes on 64-bit Linux)


def _record(signum: int):
    """The kernel's record of ``signum``: libc's struct sigaction, in a buffer it can be written back from."""
    record = ctypes.create_string_buffer(_SIZE)
    if _libc.sigaction(signum, None, record) != 0:
        raise OSError(ctypes.get_errno(), f"sigaction({signum}) failed")
    return record


def handler_address(signum: int) -> int:
    """Where the kernel jumps on ``signum`` (0 default, 1 ignored): the record's first field on Linux."""
    return int.from_bytes(_record(signum).raw[: ctypes.sizeof(ctypes.c_void_p)], "little")


@contextmanager
def kept(signum: int) -> Iterator[None]:
    """Puts ``signum``'s disposition back as it was, whatever the block did to it (an import that
    installs a handler: polars, above)."""
    before = _record(signum)
    try:
        yield
    finally:
        _libc.sigaction(signum, before, None)
