"""Fan independent work (one game, or one episode) out over processes or Ray, with the same results as a local loop.

Ray connects to ``RAY_ADDRESS`` when it is set (a cluster) and otherwise starts a local instance.
Each task writes its own game folder whole, so the layout is the same whichever worker ran it.
"""

from __future__ import annotations

import fcntl
import itertools
import multiprocessing
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from atari_data.errors import AtariDataError
from laya_protocol.errors import UNWIND_SECONDS, end_within, signal_name
from laya_protocol.ray import cancel, executor_problem, remote


def fan_out(
    fn: Callable,
    items: Iterable,
    *,
    executor: str = "local",
    workers: int = 1,
    here: Callable | None = None,
    progress: bool = True,
    desc: str | None = None,
    unit: str = "game",
) -> list:
    """``[fn(x) for x in items]``, in order: as Ray tasks, on ``workers`` spawned processes (with one
    progress bar of items), or, with one worker, ``here(x)`` (default ``fn``) one after another in
    this process, where it may show its own progress."""
    items = list(items)
    if problem := executor_problem(executor):
        raise AtariDataError(problem, field="--executor")
    if executor == "ray":
        return ray_map(fn, items)
    if workers <= 1 or len(items) <= 1:
        return [(here or fn)(x) for x in items]

    from tqdm import tqdm

    out = []
    pool = _Tracked(min(workers, len(items)))
    try:
        with tqdm(total=len(items), desc=desc, unit=unit, disable=None if progress else True) as bar:
            for task in [pool.submit(fn, x) for x in items]:
                out.append(pool.result(task))
                bar.update(1)
    finally:
        pool.stop()
    return out


@contextmanager
def ahead(fn: Callable, items: Iterator, *, executor: str = "local", workers: int = 2) -> Iterator[Iterator]:
    """``(fn(x) for x in items)``, in order, computed ``workers`` items ahead of the consumer on
    spawned processes or Ray tasks, for a sequence whose end the consumer decides (episodes until a
    split is full). Leaving the block stops the work still in flight."""
    if problem := executor_problem(executor):
        raise AtariDataError(problem, field="--executor")
    workers = max(1, workers)
    if executor == "ray":
        ray, task = _ray(fn)
        refs: deque = deque()

        def ray_results() -> Iterator:
            for x in items:
                refs.append(task.remote(x))
                if len(refs) >= workers:
                    yield _ray_get(ray, refs.popleft())
            while refs:
                yield _ray_get(ray, refs.popleft())

        try:
            yield ray_results()
        finally:
            cancel(ray, list(refs))
        return

    pool = _Tracked(workers)
    pending: deque = deque()

    def local_results() -> Iterator:
        for x in items:
            pending.append(pool.submit(fn, x))
            if len(pending) >= workers:
                yield pool.result(pending.popleft())
        while pending:
            yield pool.result(pending.popleft())

    try:
        yield local_results()
    finally:
        pool.stop()  # episodes played ahead that nobody needs


class WorkerDied(RuntimeError):
    """A worker process ended with a task in hand (killed from outside, crashed), or was killed."""


class _Tracked:
    """A spawned pool whose tasks leave a note of the worker that runs them until they return. A task
    whose note names no live worker was lost: the pool starts a replacement for a worker that ended
    and forgets its task, whose result was then waited for for ever. That, and a worker killed by a
    signal even while idle (SIGKILL there keeps the task queue's lock, which no other worker then
    gets), is an error here. A worker that ends idle by its own unwinding (a SIGTERM in the pool's
    loop: see :func:`_unwind`) lost nothing and is replaced."""

    def __init__(self, workers: int) -> None:
        self.notes, self._lock_fd = _notes_folder()  # first: no worker is started for a pool that has none
        self.pool: Any = multiprocessing.get_context("spawn").Pool(workers, die_with_parent, (os.getpid(),))
        self.jobs = itertools.count()

    def submit(self, fn: Callable, x):
        return self.pool.apply_async(_noted, (self.notes, next(self.jobs), fn, x))

    def result(self, task):
        while True:
            try:
                return task.get(timeout=0.25)
            except multiprocessing.TimeoutError:
                self._check()

    def _check(self) -> None:
        # the pool's workers now, replacements included; each exit code read once (it is a waitpid)
        codes = {w.pid: w.exitcode for w in list(self.pool._pool)}
        for code in codes.values():
            if code is not None and code < 0:
                raise WorkerDied(f"a worker process was killed by {signal_name(-code)}: rerun the same command")
        live = {pid for pid, code in codes.items() if code is None}
        for name in os.listdir(self.notes):
            if name == HELD:
                continue
            try:
                pid = int(Path(self.notes, name).read_text())
            except (OSError, ValueError):  # its task returned meanwhile, or the note is half written
                continue
            if pid not in live:
                raise WorkerDied(
                    "a worker process ended in the middle of its work, which is not kept: rerun the same command"
                )

    def stop(self) -> None:
        """Terminate the pool and wait for it, for at most STOP_SECONDS: a worker killed while it held
        the task queue's lock leaves terminate waiting for that lock for ever; then the workers are
        killed here."""

        def terminate() -> None:
            self.pool.terminate()
            self.pool.join()

        stopper = threading.Thread(target=terminate, daemon=True)
        stopper.start()
        stopper.join(STOP_SECONDS)
        if stopper.is_alive():
            for worker in list(self.pool._pool):
                worker.kill()
                worker.join(1)
        shutil.rmtree(self.notes, ignore_errors=True)
        os.close(self._lock_fd)


NOTES_PREFIX, HELD = "atari-data-tasks-", "held"


def _notes_folder() -> tuple[str, int]:
    """A new folder for a pool's task notes, and the descriptor of the lock its pool holds on it (the
    kernel drops the lock when the driver dies, even by SIGKILL, which runs no cleanup). Folders
    left that way are removed first; the lock, not a pid, tells a dead driver from a live one, so a
    reused pid or another pid namespace sharing the folder cannot mislead it."""
    for old in Path(tempfile.gettempdir()).glob(NOTES_PREFIX + "*"):
        if _left_by_a_dead_pool(old):
            shutil.rmtree(old, ignore_errors=True)
    notes = tempfile.mkdtemp(prefix=NOTES_PREFIX)
    lock_fd = os.open(Path(notes, f".{HELD}"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX)
    os.rename(Path(notes, f".{HELD}"), Path(notes, HELD))  # under its name only once it is held
    return notes, lock_fd


def _left_by_a_dead_pool(folder: Path) -> bool:
    """``folder`` is a notes folder as :func:`_notes_folder` makes them (this user's, its lock a
    regular file, nothing in it but notes) and no process holds its lock. The temporary folder is
    shared: anything else there is someone else's, and a FIFO opened for reading waits for a writer."""
    try:
        made = os.lstat(folder)
        if not stat.S_ISDIR(made.st_mode) or made.st_uid != os.getuid():
            return False
        if any(name != HELD and not name.isdigit() for name in os.listdir(folder)):
            return False
        fd = os.open(folder / HELD, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # no lock file (still being made, or from before locks), or not ours to read
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # its driver lives
        return False
    finally:
        os.close(fd)


def _noted(notes: str, job: int, fn: Callable, x):
    """``fn(x)`` in a pool worker, with a note of this worker's pid until it returns or raises an error,
    which the pool passes on. A SystemExit (the worker's SIGTERM, see :func:`_unwind`) leaves the
    note: the worker ends, and its task with it."""
    note = Path(notes, str(job))
    note.write_text(str(os.getpid()))
    try:
        result = fn(x)
    except Exception:
        note.unlink(missing_ok=True)
        raise
    note.unlink(missing_ok=True)
    return result


STOP_SECONDS = 15.0  # a pool's workers unwind from its SIGTERM in milliseconds (see UNWIND_SECONDS)


def _ray_get(ray, ref):
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as e:
        if isinstance(e.cause, AtariDataError):  # bad input stays a one-line error, wherever it was found
            raise e.cause from None
        raise


def die_with_parent(parent: int) -> None:
    """Pool initializer: end this worker within a tenth of a second of ``parent`` dying, even by
    SIGKILL, so no orphan keeps writing a game that a rerun is about to write again.

    Not PR_SET_PDEATHSIG: it follows the thread that started the worker, and the pool starts the
    replacement for a worker that died on its worker-handler thread, which ends with the pool; the
    replacement was killed there holding the task queue's lock, and the pool hung."""
    if os.getppid() != parent:  # it died while this worker started
        os._exit(1)
    # Pool.terminate's SIGTERM (the driver stopped) unwinds the game in hand as an error would: its
    # lock and staging folder are removed. By default the worker ended where it stood and left them.
    signal.signal(signal.SIGTERM, _unwind)

    def watch() -> None:  # an orphan is adopted by another process: its parent id changes
        while os.getppid() == parent:
            time.sleep(0.1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-parent").start()


def _unwind(signum, frame) -> None:
    # Out of the pool's loop (leaving after the pool's "no more tasks", which races Pool.terminate's
    # SIGTERM) there is nothing to unwind: raising there printed "Exception ignored in: <module
    # 'threading'>". In it, a SystemExit unwinds the task in hand, and an idle worker's wait lets go of
    # the task queue's lock, which os._exit kept for ever (the pool then hung).
    if not _in_pool_loop(frame):
        os._exit(128 + signum)
    # A SIGTERM to the whole group reaches a worker twice (its own, then the pool's); and a swallowed
    # exit left the pool's join waiting for ever. A SystemExit, not a Terminated: the pool's worker
    # loop prints a traceback for anything else.
    end_within(UNWIND_SECONDS, 128 + signum)
    sys.exit(128 + signum)


def _in_pool_loop(frame) -> bool:
    while frame is not None:
        if frame.f_code.co_name == "worker" and frame.f_globals.get("__name__") == "multiprocessing.pool":
            return True
        frame = frame.f_back
    return False


def _ray(fn: Callable):
    """(ray, ``fn`` as a Ray remote function), or the one line saying Ray is not installed."""
    try:
        return remote(fn)
    except ImportError:
        raise AtariDataError("--executor ray needs Ray: install atari-data[ray]", field="--executor") from None


def ray_map(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]``, computed as Ray tasks, in the order of ``items``."""
    ray, task = _ray(fn)
    refs = [task.remote(x) for x in items]
    pending = list(refs)
    try:
        while pending:  # fail fast: the first failed task stops the rest, not the last to finish
            ready, pending = ray.wait(pending, num_returns=1)
            ray.get(ready)
        return ray.get(refs)
    except BaseException as e:  # a failed task, a Ctrl-C, a dying driver: no task may go on writing
        cancel(ray, pending)
        if isinstance(e, ray.exceptions.RayTaskError) and isinstance(e.cause, AtariDataError):
            raise e.cause from None  # bad input stays a one-line error, wherever it was found
        raise
