"""Ray, started or joined the same way by every package that fans work out over it."""

from __future__ import annotations

import os
import signal
import threading

from laya_protocol.errors import UNWIND_SECONDS


def connect(num_cpus: int | None = None):
    """The ``ray`` module, connected to ``RAY_ADDRESS`` when set, else to a local instance it starts
    (of ``num_cpus`` CPUs; all of this machine's by default). Raises ImportError without Ray.

    Workers use this interpreter and its packages: under ``uv run``, Ray would otherwise rebuild a uv
    environment for them from a copy of the working directory. Ray reads that switch once, when it is
    first imported, so it is set before the import.

    SIGTERM stays the caller's. ``ray.init`` takes it over twice: in Python's table (a handler that
    exits with code 15, past the caller's one line) and in the kernel's, where abseil's failure
    handler prints a stack dump and aborts three seconds later, leaving the caller's locks behind.
    The first is put back after ``ray.init``; the second is switched off before the import, the way
    Ray documents (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``), at the cost of its C++ stack dump on a crash."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    import ray

    if not ray.is_initialized():
        main = threading.current_thread() is threading.main_thread()  # ray.init sets it from there only
        before = signal.getsignal(signal.SIGTERM) if main else None
        ray.init(address=os.environ.get("RAY_ADDRESS"), num_cpus=num_cpus, log_to_driver=False, include_dashboard=False)
        if before is not None:
            signal.signal(signal.SIGTERM, before)
    return ray


def cancel(ray, refs, patience: float = UNWIND_SECONDS) -> None:
    """Stop Ray tasks as a process pool's workers are stopped: each is interrupted where it stands (a
    KeyboardInterrupt in its worker, raised at its next Python line), so its clean-up runs as on a
    Ctrl-C; one still running ``patience`` seconds later (blocked in C code) is killed. Killed at
    once, a task left its game's lock behind, or the policy it was judging running."""
    for ref in refs:
        try:
            ray.cancel(ref)
        except Exception:  # noqa: BLE001, S110 - a finished task cannot be cancelled, which is fine
            pass
    if not refs:
        return
    _, running = ray.wait(list(refs), num_returns=len(refs), timeout=patience)
    for ref in running:  # only the unfinished: cancelling a finished task can crash Ray's task manager
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001, S110 - it finished in between
            pass
