"""The parent a stdio policy runs under on Linux, so that nothing it starts outlives it.

Run as a script (``python -I reaper.py CONTROL_FD COMMAND [ARGS...]``; standard library only), with
``CONTROL_FD`` its end of a socket pair whose other end the judge holds. It becomes a child
subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the policy starts whose parent exits
is handed to this one, not to init, however it left (``setsid``, a double fork, a cleared
environment). It starts the policy in a session of its own, with this process's standard input
and output, keeps neither, and tells the judge ``ok`` or why the policy could not start. It then
waits until the policy exits, the judge closes its end (or dies: the end closes, or this process's
parent changes), and kills each of its children, takes each orphan that falls to it, and repeats
until it has none: a process cannot fork once killed, and one that exits first leaves its children
here, where the next round finds them. A child keeps its number until it is reaped here, so no
number signalled can be another process's. It exits as the policy did: with its code, or killed
by the same signal.

It ignores the signals a policy's cleanup sends its group or parent (``kill 0``). What it cannot
stop: a policy that kills (SIGKILL) or stops (SIGSTOP) this process first, as the same user may.
Where the subreaper cannot be set, it still ends the policy; the judge's own search
(:mod:`laya_eval.processes`) runs after it in any case.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h
PR_SET_DUMPABLE = 4
SETTLE = 10.0  # seconds the final rounds may take before it gives up on what is left
#: The judge's LC_CTYPE, as ``=VALUE``, or empty where it had none: isolated (``-I``), this Python
#: ignored PYTHONCOERCECLOCALE=0 and may have set or changed it (to C.UTF-8, under the C locale),
#: which the policy must not get.
JUDGE_LC_CTYPE = "LAYA_EVAL_REAPER_LC_CTYPE"
_SHRUGGED = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def main(argv: list[str]) -> None:
    signal.pthread_sigmask(signal.SIG_SETMASK, ())  # a mask the judge's thread had would hide SIGCHLD, and pass on
    control, command = socket.socket(fileno=int(argv[0])), argv[1:]
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # else: the policy alone
    for sig in _SHRUGGED:  # handlers, not SIG_IGN: the policy starts with the default actions
        signal.signal(sig, lambda *_: None)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD writes to the wake pipe
    parent = os.getppid()
    was = os.environ.pop(JUDGE_LC_CTYPE, None)
    if was is not None:  # the policy gets the judge's environment as it was
        if was.startswith("="):
            os.environ["LC_CTYPE"] = was[1:]
        else:
            os.environ.pop("LC_CTYPE", None)
    try:  # subprocess restores SIGPIPE and SIGXFSZ, which Python ignores, and reports a failed exec
        # Held to the end: a Popen let go reaps its process if it has exited, and its status is lost.
        started = subprocess.Popen(command, start_new_session=True)
    except (OSError, ValueError) as e:
        _tell(control, f"error {e}")
        sys.exit(127)
    _tell(control, "ok")
    policy = started.pid
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # the policy alone holds the pipes: its exit is their end
    os.dup2(null, 1)
    poller = select.poll()  # not select(): a descriptor past 1023 is fine
    for fd in (control.fileno(), wake_r):
        poller.register(fd, select.POLLIN)
    status = None
    while status is None:
        ready = {fd for fd, _ in poller.poll(1000)}  # each second at least, the parent is looked at
        if wake_r in ready:
            _drain(wake_r)
        status, _ = _reap(policy, status)
        if status is None and (control.fileno() in ready or os.getppid() != parent):
            break  # the judge closed its end, or died
    status = _end_children(policy, status)
    _exit_as(status)


def _tell(control: socket.socket, line: str) -> None:
    try:
        control.sendall(line.encode(errors="replace") + b"\n")
    except OSError:  # the judge is gone: the loop below sees its end closed
        pass


def _reap(policy: int, status: int | None) -> tuple[int | None, bool]:
    """Reap every child that has exited: the policy's exit code (-N for signal N) once it is reaped,
    else ``status``; and whether any child is left (alive, or an orphan on its way here)."""
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return status, False
        if pid == 0:
            return status, True
        if pid == policy:
            status = os.waitstatus_to_exitcode(raw)


def _end_children(policy: int, status: int | None) -> int | None:
    deadline = time.monotonic() + SETTLE
    while time.monotonic() < deadline:
        for pid in _children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        status, left = _reap(policy, status)
        if not left:
            break
        time.sleep(0.001)  # the killed die, and their orphans reach this process
    return status


def _children() -> list[int]:
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", "rb") as f:
            return [int(p) for p in f.read().split()]
    except OSError:  # a kernel without the children file: every process's parent, from /proc
        return [pid for pid, parent in live_processes().items() if parent == me]


def live_processes() -> dict[int, int]:
    """pid -> parent pid of every process that is not a zombie (a killed process stays one until its
    parent reaps it), from ``/proc``. Here, standard library only, for this script; the judge's own
    search (:mod:`laya_eval.processes`) uses it too."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # gone meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after the name, which may hold spaces and parentheses
        if fields and fields[0] not in (b"Z", b"X"):
            out[int(name)] = int(fields[1])
    return out


def _exit_as(status: int | None) -> None:
    """Exit with the policy's code, or die of its signal (no core file), as the judge would have seen
    it without a parent in between."""
    if status is None or status >= 0:
        sys.exit(1 if status is None else status)
    try:  # not dumpable: no core file, nor a crash report piped to systemd-coredump or apport
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(-status, signal.SIG_DFL)  # SIGKILL has no handler to reset: refused, and not needed
    except (OSError, ValueError):
        pass
    os.kill(os.getpid(), -status)
    os._exit(128 - status)  # not reached: the signal ended the process


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
