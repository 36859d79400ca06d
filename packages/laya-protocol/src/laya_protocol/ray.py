"""Ray, started or joined the same way by every package that fans work out over it."""

from __future__ import annotations

import os
import signal
import threading

from laya_protocol.errors import UNWIND_SECONDS, ctrl_c_ignored


def connect(num_cpus: int | None = None):
    """The ``ray`` module, connected to ``RAY_ADDRESS`` when set, else to a local instance it starts
    (of ``num_cpus`` CPUs; all of this machine's by default). Raises ImportError without Ray.

    Workers use this interpreter and its packages: under ``uv run``, Ray would otherwise rebuild a uv
    environment for them from a copy of the working directory. Ray reads that switch once, when it is
    first imported, so it is set before the import.

    SIGTERM stays the caller's. ``ray.init`` takes it over, in Python's table (a handler that exits
    with code 15, past the caller's one line) and in the kernel's (abseil's failure handler, which
    prints a stack dump and aborts three seconds later, leaving the caller's locks behind). Putting
    Python's handler back puts the kernel's back too; a SIGTERM while ``ray.init`` runs goes to the
    caller's handler. Off the main thread no handler can be put back, so abseil's is switched off
    before the import instead (``RAY_DISABLE_FAILURE_SIGNAL_HANDLER``, as Ray documents), at the cost
    of its C++ stack dump on a crash."""
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    main = threading.current_thread() is threading.main_thread()  # ray.init sets its handler from there only
    if not main:
        os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    import ray

    if not ray.is_initialized():
        before = signal.getsignal(signal.SIGTERM) if main else None
        try:
            try:
                ray.init(
                    address=os.environ.get("RAY_ADDRESS"),
                    num_cpus=num_cpus,
                    log_to_driver=False,
                    include_dashboard=False,
                )
            finally:
                if before is not None:
                    signal.signal(signal.SIGTERM, before)
        except SystemExit as e:  # ray.init's own handler, sys.exit(signum), took a SIGTERM
            if e.code == signal.SIGTERM and callable(before):
                before(signal.SIGTERM, None)  # the caller's way out: terminations_raised's raises Terminated
            raise
    return ray


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
