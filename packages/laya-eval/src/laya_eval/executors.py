"""Fan games out over Ray (``RAY_ADDRESS``, else a local instance), yielding results as they land."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from laya_eval.errors import EvalError
from laya_eval.stdio import CLOSE_WAIT, REAPER_WAIT
from laya_protocol.ray import cancel, remote

#: How long a cancelled game may take to close its policy (the close message written, the policy's own
#: exit, then its reaper's work) before its worker is killed, and Ray kills the worker's children
#: with it: the policy's reaper first, which leaves the policy and what it started running.
CANCEL_PATIENCE = 2 * CLOSE_WAIT + REAPER_WAIT + 2.0


def ray_each(fn: Callable, calls: list[tuple]) -> Iterator:
    """``fn(*args)`` for each args tuple, as Ray tasks; results in completion order. Leaving early (a
    Ctrl-C, a SIGTERM, a consumer that stops) stops the tasks still running: each ends its policy."""
    try:
        ray, task = remote(fn)
    except ImportError:
        raise EvalError("--executor ray needs Ray: install laya-eval[ray]", field="--executor") from None
    pending = [task.remote(*args) for args in calls]
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        cancel(ray, pending, CANCEL_PATIENCE)
