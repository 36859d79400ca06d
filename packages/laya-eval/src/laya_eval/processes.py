"""Ending a stdio policy and every process it started: the judge's own search.

On Linux a policy runs under a reaper (:mod:`laya_eval.reaper`), to which every orphan it leaves
falls, and which ends them all when the policy is closed; what follows is the judge's second line,
for a policy that killed or stopped its reaper, and the only one elsewhere. A policy runs in a session of its
own, so killing its process group ends whatever stayed in it. On Linux, a process that left the
group (``setsid``) is found too: by its parentage, read from ``/proc``, while its parent lives, and
by a mark in its environment, ``LAYA_EVAL_POLICY=<token>``, which every descendant inherits, once
its parent is gone (a double fork, as daemons start). Out of this search's reach (not the
reaper's): a process that both loses its parent and clears its environment, and one that forks and
exits in a loop faster than a pass over ``/proc`` (its number changes before it is signalled).
Without ``/proc`` only the process group is killed.
"""

from __future__ import annotations

import os
import secrets
import signal
from pathlib import Path

from laya_eval.reaper import live_processes

MARK = "LAYA_EVAL_POLICY"
_PROC = Path("/proc")
_ENVIRON_CAP = 4 << 20  # an environment is at most a few MB (the kernel's argument limit)


def new_mark() -> str:
    """A token for one policy process, unique on this machine."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


def end_all(pid: int | None, mark: str) -> None:
    """SIGKILL the process group of ``pid``, then every live process descended from it or carrying
    ``mark``; what forks meanwhile is found in the next round (a few at most). ``pid`` is None once
    the process was reaped: its number may be another process's by then, so only the mark counts."""
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass  # the group is gone already
    if not _PROC.is_dir():
        return
    needle, me = f"{MARK}={mark}".encode(), os.getpid()
    for _ in range(5):
        parents = live_processes()
        found = {p for p in parents if p == pid or _marked(p, needle)}
        if pid is not None:
            found |= _descendants(pid, parents)
        found -= {me, 1}
        if not found:
            return
        for p in found:
            try:
                os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _descendants(pid: int, parents: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p, parent in parents.items():
        children.setdefault(parent, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _marked(pid: int, needle: bytes) -> bool:
    try:
        with open(_PROC / str(pid) / "environ", "rb") as f:
            return needle in f.read(_ENVIRON_CAP).split(b"\0")
    except OSError:  # another user's, or gone meanwhile
        return False
