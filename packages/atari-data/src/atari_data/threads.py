"""How many threads atari-data's frame work uses: one a core this process may run on, at most 8.

Frame work (inflating, re-compressing) is libdeflate's, which lets go of the GIL, so threads
spread it over cores; past 8 the Python between frames is the limit.
"""

from __future__ import annotations

import os

#: The most threads a command may be asked for: more only hand work over.
MAX_THREADS = 64


def frame_threads() -> int:
    """One thread a core this process may run on, at most 8."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores))
