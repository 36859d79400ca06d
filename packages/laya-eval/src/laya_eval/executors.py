"""Fan games out over Ray (``RAY_ADDRESS``, else a local instance), yielding results as they land."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

from laya_eval.errors import EvalError


def ray_each(fn: Callable, calls: list[tuple]) -> Iterator:
    """``fn(*args)`` for each args tuple, as Ray tasks; results in completion order."""
    # Workers use this interpreter and its packages; under `uv run` Ray would otherwise rebuild a uv
    # environment for them from a copy of the working directory. Ray reads this once, on first import.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    try:
        import ray
    except ImportError:
        raise EvalError("--executor ray needs Ray: install laya-eval[ray]", field="--executor") from None
    if not ray.is_initialized():
        ray.init(address=os.environ.get("RAY_ADDRESS"), log_to_driver=False, include_dashboard=False)
    task = ray.remote(fn)
    pending = [task.remote(*args) for args in calls]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])
