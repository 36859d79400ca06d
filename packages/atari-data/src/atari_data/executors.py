"""Fan independent work (one game each) out over processes or Ray, with the same results as a local loop.

Ray connects to ``RAY_ADDRESS`` when it is set (a cluster) and otherwise starts a local instance.
Each task writes its own game folder whole, so the layout is the same whichever worker ran it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

from atari_data.errors import AtariDataError

EXECUTORS = ("local", "ray")


def fan_out(fn: Callable, items: Iterable, *, executor: str = "local", workers: int = 1, here: Callable | None = None,
            progress: bool = True, desc: str | None = None, unit: str = "game") -> list:
    """``[fn(x) for x in items]``, in order: as Ray tasks, on ``workers`` spawned processes (with one
    progress bar of items), or, with one worker, ``here(x)`` (default ``fn``) one after another in
    this process, where it may show its own progress."""
    items = list(items)
    if executor not in EXECUTORS:
        raise AtariDataError(f"unknown executor {executor!r} (expected {' or '.join(EXECUTORS)})", field="--executor")
    if executor == "ray":
        return ray_map(fn, items)
    if workers <= 1 or len(items) <= 1:
        return [(here or fn)(x) for x in items]
    import multiprocessing as mp

    from tqdm import tqdm

    out = []
    with mp.get_context("spawn").Pool(min(workers, len(items))) as pool, \
            tqdm(total=len(items), desc=desc, unit=unit, disable=None if progress else True) as bar:
        for result in pool.imap(fn, items):
            out.append(result)
            bar.update(1)
    return out


def ray_map(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]``, computed as Ray tasks, in the order of ``items``."""
    try:
        import ray
    except ImportError:
        raise AtariDataError("--executor ray needs Ray: install atari-data[ray]", field="--executor") from None
    if not ray.is_initialized():
        # Workers use this interpreter and its packages; Ray would otherwise rebuild a uv
        # environment from a copy of the working directory when the driver runs under `uv run`.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False, include_dashboard=False)
    task = ray.remote(fn)
    try:
        return ray.get([task.remote(x) for x in items])
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, AtariDataError):  # bad input stays a one-line error, wherever it was found
            raise e.cause from None
        raise
