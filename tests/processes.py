"""What /proc says of the processes a test started: Linux only, as the tests that stop them are."""

from __future__ import annotations

import os
import signal
import subprocess


def as_from_a_terminal() -> None:
    """``preexec_fn`` for a process a test will stop with Ctrl-C or SIGHUP: the default actions, as a
    terminal's foreground job has them. What a test starts inherits ignored signals, and a test run
    started as a background job (``cmd &``: SIGINT and SIGQUIT ignored) or under ``nohup`` (SIGHUP)
    started CLIs deaf to the very signal the test sent; the tests waited out their 60 s."""
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def deaf_to_ctrl_c() -> None:
    """``preexec_fn`` for a process started as a background job starts (``cmd &``): SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def ended(process: subprocess.Popen, timeout: float = 60) -> tuple[str, str]:
    """``process.communicate(timeout)``; if it has not ended by then, it and every process under it are
    killed before the test fails, so that a hung training group does not train on beside the rest of
    the run (one did, for the rest of a suite, on both cores). The failure lists what was running, and
    where each process waited in the kernel, as it was before the kill."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree = [process.pid, *descendants(process.pid)]  # the parent first: it cannot start more then
        running = "\n".join(_described(pid) for pid in tree)
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            _, err = process.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process outside the tree holds its pipes
            err = ""
        said = f"{process.args} did not end within {timeout} s; it and its processes were killed. They were:\n"
        raise AssertionError(said + running + f"\n--- its stderr, the end:\n{(err or '')[-2000:]}") from None


def _described(pid: int) -> str:
    """``pid``, its state, the kernel function it waits in and its command line."""
    try:
        with open(f"/proc/{pid}/wchan") as f:
            wchan = f.read() or "-"
    except OSError:
        wchan = "-"
    return f"{pid} {_state(pid) or '(gone)'} {wchan} {_cmdline(pid).replace(chr(0), ' ')[:200]}"


def descendants(pid: int) -> list[int]:
    """Every process under ``pid``, children before their own."""
    found: list[int] = []
    for child in _children_of(pid):
        found += [child, *descendants(child)]
    return found


def spawned(pid: int) -> set[int]:
    """The processes ``pid`` started through multiprocessing's spawn, from any of its threads (a pool
    starts a dead worker's replacement on its worker-handler thread)."""
    return {p for p in _children_of(pid) if "spawn_main" in _cmdline(p)}


def _children_of(pid: int) -> set[int]:
    """The processes ``pid`` started, from any of its threads (each thread lists its own)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return set()
    return {int(p) for t in tasks for p in _children(pid, t)}


def _children(pid: int, task: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{task}/children") as f:
            return f.read().split()
    except OSError:
        return []


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def named(pid: int, name: str) -> list[int]:
    """The processes under ``pid`` whose command line holds ``name`` (Ray's show their role there:
    ``ray::IDLE``, ``ray::DashboardAgent``)."""
    return [p for p in descendants(pid) if name in _cmdline(p)]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: neither gone nor a zombie waiting for its parent."""
    return _state(pid) not in ("", "Z", "X")


def _state(pid: int) -> str:
    """The one-letter state /proc gives ``pid`` (R, S, D, Z...), or "" when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return ""
