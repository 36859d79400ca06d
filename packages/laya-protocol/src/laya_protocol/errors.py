"""The exceptions this package raises, and how every package words a foreign one in its one-line errors."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from contextlib import contextmanager


class UnknownName(ValueError):
    """A game, scenario or action set that does not exist; ``close`` holds the nearest real names."""

    def __init__(self, message: str, close: tuple[str, ...] = ()):
        super().__init__(message + (f"; did you mean {', '.join(close)}?" if close else ""))
        self.close = close


def shown(v: int | float) -> str:
    """A number as a one-line error shows it: a 400-digit integer by its first digits and its length."""
    text = f"{v:.6g}" if type(v) is float else str(v)
    return text if len(text) <= 24 else f"{text[:12]}... ({len(text)} digits)"


#: What a terminal or an editor acts on rather than shows: control characters, and the marks that
#: reorder the text around them (a right-to-left override makes "exe.txt" read "txt.exe").
_UNSHOWN = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """``text`` with what a terminal would act on (an escape sequence, a carriage return, a bidi
    override) written as escapes: text a stranger wrote (a policy's error, a name), shown to a user."""
    return _UNSHOWN.sub(lambda m: ascii(m[0])[1:-1], text)


def one_line(text: str) -> str:
    """``text`` as a one-line error prints it, whatever it quotes: a library's message ending in a
    newline, a file name holding one or a terminal escape, or a name's undecodable bytes
    (surrogates), as escapes."""
    return visible(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def os_said(e: OSError) -> str:
    """An OSError for a one-line error: the file (and the second, for a rename), then what the system
    said, as ``path: No space left on device``."""
    files = " -> ".join(str(f) for f in (e.filename, e.filename2) if f is not None)
    what = e.strerror or str(e) or type(e).__name__
    return one_line(f"{files}: {what}" if files else what)


def os_error_exit(e: OSError) -> int:
    """How a command ends on an OSError, and the exit code: output piped into a reader that stopped
    (``| head``) quietly, 0; anything else (a full disk, a folder made read-only or removed mid-run)
    on one line naming the file, 2, never a traceback."""
    import sys

    if isinstance(e, BrokenPipeError):
        sys.stderr.close()  # nothing more to say, and Python's flush at exit would say it failed
        return 0
    print(f"error: {os_said(e)}", file=sys.stderr)
    return 2


def cause(e: BaseException, width: int = 200) -> str:
    """``e`` for a one-line error: its type and the first line of its message, with the lines after
    while a line ends in ':' (torch's 'Error(s) in loading state_dict for X:' says what only on the
    next), at most ``width`` characters, cut at a word with '...'. A pickle refused by
    ``torch.load(weights_only=True)`` is named for what it is: torch's own first line is advice to
    load the file anyway, and cut short it lost its warning."""
    import pickle

    try:
        text = str(e)
    except Exception:  # noqa: BLE001 - a stranger's exception may fail even to say what it is
        text = ""
    if isinstance(e, pickle.UnpicklingError) and "Weights only load failed" in text:
        found = next((line.strip() for line in text.splitlines() if "GLOBAL" in line), "")
        return (
            f"{type(e).__name__}: it holds pickled objects that are not tensors or plain data "
            f"({found[:width] or 'an unsupported object'}); refused, as loading them could run code"
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    said = lines[:1]
    while said and said[-1].endswith(":") and len(said) < len(lines):
        said.append(lines[len(said)])
    first = " ".join(said)
    if len(first) > width:  # at a word, unless that drops much of a long one (a path)
        cut = first[: width - 3]
        at = cut.rfind(" ")
        first = (cut[:at] if at > 0 and at >= len(cut) - 20 else cut).rstrip(" ,;:") + "..."
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; a number with no name (a real-time signal) as ``signal 40``."""
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a scheduler's stop, a closed terminal), raised where the program stands as a
    Ctrl-C is, so the same way out runs: locks released, staging and temporary folders removed, worker
    processes ended. Python's default for both ended the process on the spot and left them."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal_name(signum))


#: The signals :func:`terminations_raised` turned into :class:`Terminated` (the first stop counts).
#: Kept apart from the exception: Ray's ``ray.get`` raises a plain KeyboardInterrupt in its place.
_received: list[int] = []


@contextmanager
def terminations_raised() -> Iterator[None]:
    """Within it, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread where each is at its
    default (``nohup``'s ignored SIGHUP stays ignored). After the first, both are ignored, so a second
    (``uv run`` passes a group's signal on once more) cannot cut the way out short; and the process
    ends within ``GRACE_SECONDS`` all the same, should the exception be swallowed (raised inside a
    ``__del__`` that the garbage collector runs). Each CLI's ``main`` runs in it; the handlers before
    are restored."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    ours = (signal.SIGTERM, signal.SIGHUP)

    def stop(signum, frame):
        end_within(GRACE_SECONDS, 128 + signum)
        _received.append(signum)
        raise Terminated(signum)

    _received.clear()
    before = {s: signal.getsignal(s) for s in ours}
    for s in ours:
        if before[s] == signal.SIG_DFL:
            signal.signal(s, stop)
    try:
        yield
    finally:
        for s in ours:
            signal.signal(s, before[s])


#: The stops :func:`signals_held` holds: Ctrl-C, SIGTERM and SIGHUP.
HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def signals_held(patience: float | None = None) -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held within, then the most final of them (a SIGTERM after a
    Ctrl-C wins) given to the handler that was in place: for work a stop would cut in half
    (torch.save's zip writer, interrupted, broke with a RuntimeError; ray.init left its agents). Held
    ``patience`` seconds at most, if given: then delivered where the work stands. Main thread only;
    a handler set outside Python is left as it is."""
    import _thread
    import threading

    if threading.current_thread() is not threading.main_thread():  # no handler can be set there
        yield
        return
    before: dict[int, object] = {s: signal.getsignal(s) for s in HELD}
    held: list[int] = []
    overdue, delivered = threading.Event(), threading.Event()

    def hold(signum, _frame) -> None:
        if overdue.is_set():  # the patience is up: the caller's handler, where the work stands
            delivered.set()
            _restore(before)
            return _deliver(signum, before[signum])
        if not held and timer is not None:
            timer.start()
        held.append(signum)

    def late() -> None:
        overdue.set()
        _thread.interrupt_main(signal.Signals(held[0]))  # runs hold in the main thread

    timer = None if patience is None else threading.Timer(patience, late)
    if timer is not None:
        timer.daemon = True
    for s in HELD:
        if callable(before[s]) or before[s] == signal.SIG_DFL:
            signal.signal(s, hold)
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        _restore(before)
        if held and not delivered.is_set():
            first = signal.SIGTERM if signal.SIGTERM in held else held[0]
            _deliver(first, before[first])


def _restore(handlers: dict) -> None:
    for s, h in handlers.items():
        if h is not None:  # None: set outside Python, and not ours to touch
            signal.signal(s, h)


def _deliver(signum: int, handler) -> None:
    """``signum`` as it would have landed on ``handler``: called, the default action, or nothing."""
    if callable(handler):
        handler(signum, None)
    elif handler == signal.SIG_DFL:
        signal.raise_signal(signum)


@contextmanager
def ctrl_c_ignored() -> Iterator[None]:
    """SIGINT ignored within, put back after: for a way out that a second Ctrl-C (``uv run`` passes
    a terminal's on once more) would cut short. The main thread only may set it; a handler set
    outside Python is left as it is."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    if before is not None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


def end_within(seconds: float, code: int) -> None:
    """For a process unwinding from a SIGTERM or SIGHUP: ignore both from now on (a signal to a
    whole group can arrive twice, and the second would cut the clean-up short), and end with
    ``code`` after ``seconds`` should the unwinding be swallowed (an exception raised inside a
    ``__del__`` that the garbage collector runs is dropped)."""
    import os
    import signal
    import threading

    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    fallback = threading.Timer(seconds, os._exit, (code,))
    fallback.daemon = True
    fallback.start()


#: How long a stop from outside may take to unwind (a training group's reaping takes up to 15 s).
GRACE_SECONDS = 60.0

#: How long one worker's task may take to unwind when stopped before it is ended: a game's clean-up
#: (its lock, its staging folder) takes milliseconds.
UNWIND_SECONDS = 3.0


def stopped(e: KeyboardInterrupt) -> tuple[str, int]:
    """How a CLI words a stop from outside, and its exit code: ("interrupted", 130) for a Ctrl-C,
    ("terminated (SIGTERM)", 143) for a :class:`Terminated`, as a shell counts 128 + the signal; also
    for a KeyboardInterrupt that C code raised in a Terminated's place."""
    if isinstance(e, Terminated):
        return f"terminated ({e})", 128 + e.signum
    if _received:
        return f"terminated ({signal_name(_received[0])})", 128 + _received[0]
    return "interrupted", 130
