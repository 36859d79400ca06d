"""Ray, started or joined the same way by every package that fans work out over it."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable

from laya_protocol.errors import UNWIND_SECONDS, ctrl_c_ignored, signals_held

#: Where a package's --executor runs its work: here (a process pool or this process), or on Ray.
EXECUTORS = ("local", "ray")


def executor_problem(executor: str) -> str | None:
    """Why ``executor`` is none of :data:`EXECUTORS`, or None."""
    return None if executor in EXECUTORS else f"unknown executor {executor!r} (expected {' or '.join(EXECUTORS)})"


#: How long a Ctrl-C or SIGTERM that arrives while ``ray.init`` runs is held for it to finish (its
#: start-up takes about 6 s on two busy cores); past that, it is delivered where init stands.
START_PATIENCE = 10.0


def connect(num_cpus: int | None = None):
    """The ``ray`` module, connected to ``RAY_ADDRESS`` when set, else to a local instance it starts
    (of ``num_cpus`` CPUs; all of this machine's by default). Raises ImportError without Ray.

    Workers use this interpreter and its packages: under ``uv run``, Ray would otherwise rebuild a uv
    environment for them from a copy of the working directory. Ray reads that switch once, when it is
    first imported, so it is set before the import.

    Ctrl-C and SIGTERM stay the caller's. Raised inside ``ray.init``, either left a driver half
    built: it crashed (SIGSEGV) on its way out, or left Ray's agents running for a minute. So while
    ``ray.init`` runs on the main thread they are held, and raised through the caller's handlers
    when it returns (or after ``START_PATIENCE``, should it hang). Ray's own SIGTERM handler, which
    exits with code 15 past the caller's one line, is not installed; nor is abseil's failure handler
    (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, set before the import, as Ray documents), which turned a
    SIGTERM into a stack dump and an abort three seconds later, cutting the caller's clean-up short;
    the cost is its C++ stack dump on a crash. A ``ray.init`` that fails shuts down what it started."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    import ray

    if not ray.is_initialized():
        with _held_through(ray):
            try:
                ray.init(
                    address=os.environ.get("RAY_ADDRESS"),
                    num_cpus=num_cpus,
                    log_to_driver=False,
                    include_dashboard=False,
                    logging_level=logging.ERROR,  # its start-up lines came before a command's own
                )
            except BaseException:
                with ctrl_c_ignored(), contextlib.suppress(Exception):
                    ray.shutdown()
                raise
    return ray


def remote(fn: Callable, num_cpus: int | None = None):
    """(the ``ray`` module, connected as :func:`connect` connects, ``fn`` as a Ray remote function)
    whose tasks :func:`cancel` can interrupt. Raises ImportError without Ray."""
    ray = connect(num_cpus)
    return ray, ray.remote(_interruptible(fn))


def _interruptible(fn: Callable) -> Callable:
    """``fn``, run in a worker where Ctrl-C raises KeyboardInterrupt. Ray interrupts a cancelled task
    as a Ctrl-C would, and a worker inherits its driver's ignored SIGINT (a driver started as a
    background job, ``cmd &``, has it): the interrupt did nothing, the task was killed, and its clean-up
    (a game's lock, a policy's processes) never ran. Ray starts each worker in a process group of its
    own, so a terminal's Ctrl-C still reaches only the driver."""

    def task(*args, **kwargs):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, signal.default_int_handler)
        return fn(*args, **kwargs)

    task.__name__ = task.__qualname__ = getattr(fn, "__name__", "task")  # Ray names the task after it
    return task


@contextlib.contextmanager
def _held_through(ray):
    """Ctrl-C and SIGTERM held within (see connect), with Ray's own SIGTERM handler not installed."""
    real = getattr(ray._private.utils, "set_sigterm_handler", None)  # ray.init's: sys.exit(15) on SIGTERM
    with signals_held(START_PATIENCE):
        try:
            if real is not None:
                ray._private.utils.set_sigterm_handler = lambda _handler: None
            yield
        finally:
            if real is not None:
                ray._private.utils.set_sigterm_handler = real


def cancel(ray, refs, patience: float = UNWIND_SECONDS) -> None:
    """Stop Ray tasks as a process pool's workers are stopped: each unfinished one is interrupted
    where it stands (a KeyboardInterrupt in its worker, raised at its next Python line), so its
    clean-up runs as on a Ctrl-C; one still running ``patience`` seconds later (blocked in C code) is
    killed. Killed at once, a task left its game's lock behind, or the policy it judged running.
    Deaf to a second Ctrl-C while it waits (``uv run`` passes one on), which would skip the kills."""
    if not refs:
        return
    with ctrl_c_ignored():
        running = _unfinished(ray, list(refs), 0.0)
        for ref in running:  # only the unfinished: cancelling a finished task can crash Ray's task manager
            _cancel(ray, ref, force=False)
        for ref in _unfinished(ray, running, patience):
            _cancel(ray, ref, force=True)


def _unfinished(ray, refs: list, timeout: float) -> list:
    """Those of ``refs`` still running after ``timeout`` seconds (all of them, should Ray not say);
    their results stay where they are."""
    if not refs:
        return []
    try:
        _, running = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=False)
    except Exception:  # noqa: BLE001 - a lost raylet: treat every task as running, so each is killed
        return refs
    return running


def _cancel(ray, ref, force: bool) -> None:
    try:
        ray.cancel(ref, force=force)
    except Exception:  # noqa: BLE001, S110 - it finished in between, which is fine
        pass
