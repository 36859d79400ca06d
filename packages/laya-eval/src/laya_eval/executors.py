"""Fan games out over Ray (``RAY_ADDRESS``, else a local instance), yielding results as they land."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from laya_eval.errors import EvalError
from laya_protocol.ray import connect


def ray_each(fn: Callable, calls: list[tuple]) -> Iterator:
    """``fn(*args)`` for each args tuple, as Ray tasks; results in completion order."""
    try:
        ray = connect()
    except ImportError:
        raise EvalError("--executor ray needs Ray: install laya-eval[ray]", field="--executor") from None
    task = ray.remote(fn)
    pending = [task.remote(*args) for args in calls]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])
