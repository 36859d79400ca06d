"""What /proc says of the processes a test started: Linux only, as the tests that stop them are."""

from __future__ import annotations

import os


def spawned(pid: int) -> set[int]:
    """The processes ``pid`` started through multiprocessing's spawn, from any of its threads (a pool
    starts a dead worker's replacement on its worker-handler thread)."""
    children = {int(p) for t in os.listdir(f"/proc/{pid}/task") for p in _children(pid, t)}
    return {p for p in children if "spawn_main" in _cmdline(p)}


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


def alive(pid: int) -> bool:
    """Whether ``pid`` runs: neither gone nor a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")
