"""The parent a stdio policy runs under on Linux, so that nothing it starts outlives it.

Run as a script (``python -I reaper.py CONTROL_FD COMMAND [ARGS...]``; standard library only). It
becomes a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the policy starts
whose parent exits is handed to this one, not to init, however it left (``setsid``, a double
fork, a cleared environment). It starts the policy with its own standard input and output, keeps
neither, and waits. When the policy exits, or the judge closes ``CONTROL_FD`` (or dies), it kills
each of its children, takes each orphan that falls to it, and repeats until it has none: a
process cannot fork once killed, and one that exits first leaves its children here, where the next
round finds them. A killed or exited child keeps its number until it is reaped here, so no number
signalled can be another process's. It exits with the policy's code (128 + N for signal N).

What it cannot stop: a policy that kills this process first (it may; it runs as the same user).
The judge's own search (:mod:`laya_eval.processes`) still runs after it.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
SETTLE = 10.0  # seconds the final rounds may take before it gives up on what is left


def main(argv: list[str]) -> int:
    control, command = int(argv[0]), argv[1:]
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        os.close(control)
        os.execvp(command[0], command)  # not a reaper here: the policy runs as it would without one
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wake pipe
    try:
        policy = os.fork()
    except OSError as e:
        print(f"laya-eval reaper: cannot fork: {e}", file=sys.stderr)
        return 127
    if policy == 0:
        try:
            os.close(control)
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.execvp(command[0], command)
        except OSError as e:
            print(f"cannot start {command[0]!r}: {e}", file=sys.stderr)
        os._exit(127)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the policy alone holds the pipes: its exit is their end
    os.dup2(null, 1)
    code = None
    while code is None:
        readable, _, _ = select.select([control, wake_r], [], [])
        if wake_r in readable:
            _drain(wake_r)
        code = _reap(policy)
        if control in readable and code is None:
            break  # the judge closed it, or died
    _end_children()
    return 1 if code is None else code


def _reap(policy: int) -> int | None:
    """Reap every child that has exited; the policy's exit code if it was one of them."""
    code = None
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return code
        if pid == 0:
            return code
        if pid == policy:
            code = os.waitstatus_to_exitcode(status)
            code = 128 - code if code < 0 else code


def _end_children() -> None:
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return  # none left, not even an orphan on its way here
        if pid == 0:
            time.sleep(0.001)


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # a kernel without the children file: the parent of every process, from /proc
        pass
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            if int(stat[stat.rfind(b")") + 2 :].split()[1]) == me:
                found.append(int(name))
    return found


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
