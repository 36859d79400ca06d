"""The stdio policy protocol: a policy in any language, as a subprocess.

laya-eval starts ``COMMAND`` once per run and talks to it over its standard input and output.
Every message is one line of JSON (UTF-8, ending in a newline); an ``act`` message is followed
by raw frame bytes. The policy answers every message except ``close`` with one JSON line.

Evaluator to policy::

    {"type": "hello", "protocol": 1}
    {"type": "reset", "game": "Pong", "actions": ["NOOP", "FIRE", ...]}
    {"type": "act", "game": "Pong", "n": 3, "height": 210, "width": 160, "channels": 3,
     "new_episode": [true, false, false], "episodes": [0, 1, 2], "nbytes": 604800}
    <nbytes of uint8: the n current frames, then the n previous frames, each H x W x C, C order>
    {"type": "close"}

Policy to evaluator::

    hello -> {"name": "my-policy", ...}            (any identity fields; stored with the results)
    reset -> {"ok": true}
    act   -> {"actions": [2, 0, 5]}                 (indices into the game's actions)
          or {"probs": [[0.1, 0.9, ...], ...]}      (n rows of len(actions) probabilities)
    any   -> {"error": "what went wrong"}

Answers are standard JSON (no NaN or Infinity, which strict readers of the results refuse, and no
key twice in one object), each line at most 64 MB (probabilities for 10,000 episodes are about
4 MB) and of at most a few JSON values per number its answer needs (an answer to ``act`` holds
``actions`` or ``probs``, not both, and probabilities are numbers). An error's text is kept to
its first 200 characters. Standard error passes through. A line the evaluator did not ask for (a
second answer to one message, found at the next message, or within 0.1 s of a game's end) fails the game,
since answers out of turn would make every later action stale. Every
exchange is bounded by the timeout: a policy that does not read a message (and its frames) or
does not answer within it is killed, with everything it started (on Linux it runs under
:mod:`laya_eval.reaper`, then :mod:`laya_eval.processes` searches for what is left),
and the game is recorded as failed. Each game starts from a clean protocol state: after a
failure (killed, exited, a line that is not the answer) the next ``reset`` starts a fresh process
and says ``hello`` again, so one failure is charged to the game it happened in, not to the rest.
"""

from __future__ import annotations

import io
import json
import os
import queue
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import numpy as np

from laya_eval.batch import MAX_IDENTITY, SAID, Batch, PolicyError
from laya_eval.processes import MARK, end_all, new_mark
from laya_eval.reaper import JUDGE_LC_CTYPE
from laya_eval.reaper import __file__ as REAPER
from laya_protocol.errors import one_line, shown
from laya_protocol.files import NotStandard, loads_standard

PROTOCOL_VERSION = 1
REAPER_WAIT = 5.0  # seconds the judge waits for the reaper to end a policy's processes before it kills it too
CLOSE_WAIT = 5.0  # seconds a policy has to read the close message, and then to exit on its own
#: A wait for the policy wakes this often (seconds), so that an interrupt raised without a signal
#: (Ray's cancel of a running task) lands at once: a blocked wait sees none until it ends.
WAKE = 0.1
MAX_LINE = 64 << 20  # bytes of one answer line, its newline aside
#: JSON values one answer may hold beside those it needs: an identity's at most (each takes a byte of
#: its JSON at least). Each parsed value is a Python object, and 63 MB of empty lists took 2.4 GB.
SPARE_VALUES = MAX_IDENTITY
LINES_HELD = 2  # lines read ahead of the exchange: its answer, and one it did not ask for
_TOO_LONG = object()  # what the reader hands on for a line past MAX_LINE, instead of the line
_CUT = object()  # what it hands on for a last line without its newline


class _ErrorAnswer(PolicyError):
    """The policy answered ``{"error": ...}``: the game fails, the process stays in step."""


class StdioPolicy:
    def __init__(self, command: str, timeout: float):
        from laya_eval.errors import EvalError

        try:  # split as a shell line is, never run by a shell; refused here, before any game
            self.argv = shlex.split(command)
        except ValueError as e:
            raise EvalError(f"cmd:{command}: cannot be split into words ({e})", field="--policy") from None
        if not self.argv:
            raise EvalError("cmd: names no command (expected cmd:PROGRAM [ARGS...])", field="--policy")
        self.command, self.timeout = command, timeout
        self.proc: subprocess.Popen | None = None
        self.identity: dict = {}
        self._broken = False  # the last exchange failed: the next game starts a fresh process
        self._control: socket.socket | None = None  # the judge's end of the reaper's: closing it ends them all
        self._done = threading.Event()  # set when a process is closed: its reader lets go of its queue

    def _start(self) -> None:
        self._mark = new_mark()
        argv, theirs = self.argv, None
        env = {**os.environ, MARK: self._mark}
        if sys.platform.startswith("linux"):  # under a reaper, which ends whatever the policy started
            import fcntl  # POSIX only

            self._control, pair = socket.socketpair()
            # Numbered 3 or above: a judge started with its standard streams closed would otherwise hand
            # the socket on as one of the policy's (its stderr filling a socket nobody reads).
            theirs = fcntl.fcntl(pair.fileno(), fcntl.F_DUPFD_CLOEXEC, 3)
            pair.close()
            argv = [sys.executable, "-I", REAPER, str(theirs), *self.argv]
            env[JUDGE_LC_CTYPE] = "=" + env["LC_CTYPE"] if "LC_CTYPE" in env else ""
        try:  # its own session, and a mark in its environment that every process it starts inherits
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                bufsize=0,
                start_new_session=True,
                env=env,
                pass_fds=() if theirs is None else (theirs,),
            )
        except OSError as e:
            why = str(e)
            if self._control is not None:
                self._control.close()
                self._control = None
                why = f"its reaper ({sys.executable}) did not start: {e}"
            raise PolicyError(f"cannot start {self.command!r}: {why}") from None
        finally:
            if theirs is not None:
                os.close(theirs)
        if self._control is not None and (started := self._started()) != "ok":
            self.close(kill=True)
            raise PolicyError(f"cannot start {self.command!r}: {started}")
        self._lines: queue.Queue = queue.Queue(maxsize=LINES_HELD)
        self._done = threading.Event()
        threading.Thread(target=self._read, args=(self.proc.stdout, self._lines, self._done), daemon=True).start()
        self.identity = self._ask({"type": "hello", "protocol": PROTOCOL_VERSION})

    def _started(self) -> str:
        """The reaper's first line: ``ok`` once the policy started, else why it did not."""
        assert self._control is not None and self.proc is not None
        self._control.settimeout(self.timeout)
        line = b""
        try:
            while not line.endswith(b"\n") and len(line) < 4096:
                chunk = self._control.recv(4096)
                if not chunk:
                    break
                line += chunk
        except OSError:  # timed out
            return f"its reaper said nothing within {self.timeout:g}s"
        text = line.decode(errors="replace").strip()
        if text == "ok":
            return text
        if text.startswith("error "):
            return text[len("error ") :]
        return f"its reaper exited (code {self.proc.wait()})"

    @staticmethod
    def _read(stream, lines: queue.Queue, done: threading.Event) -> None:
        """Lines of ``stream`` onto ``lines``, then None at its end. Buffered here, on a thread of its
        own (the pipe itself is unbuffered, and its readline read a byte at a time: 1.6 MB/s). The
        queue holds a few lines: a policy writing what nobody asked for then waits on its pipe, where
        every line was held (2 GB in the 5 s a close waits); ``done`` lets go of a queue nobody reads."""
        reader = io.BufferedReader(stream, 1 << 20)
        while line := reader.readline(MAX_LINE + 1):
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                _put(lines, _TOO_LONG, done)  # the exchange kills the process: nothing more is read
                return
            if not line.endswith(b"\n"):  # its output ended inside a line: a line, and an answer, cut short
                _put(lines, _CUT, done)
                break
            if not _put(lines, line, done):
                return
        _put(lines, None, done)

    def _ask(self, message: dict, payload: bytes = b"", expect: tuple[str, ...] = (), needs: int = 0) -> dict:
        """The answer to ``message``, which needs ``needs`` JSON values (numbers) besides spare ones."""
        try:
            return self._exchange(message, payload, expect, needs + SPARE_VALUES)
        except _ErrorAnswer:  # an answer, so the protocol is still in step
            raise
        except PolicyError:
            self._broken = True
            raise

    def _exchange(self, message: dict, payload: bytes, expect: tuple[str, ...], values: int) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                raise PolicyError(f"{self.command!r} exited with code {self.proc.returncode}")
            self._start()
        proc = self.proc
        assert proc is not None and proc.stdin is not None  # _start raises when it cannot start one
        self._unasked()
        self._write(proc, json.dumps(message).encode() + b"\n" + payload, message["type"])
        try:
            line = _woken_get(self._lines, self.timeout)
        except queue.Empty:
            self.close(kill=True)
            raise PolicyError(
                f"no answer to {message['type']!r} within {self.timeout:g}s; killed {self.command!r}"
            ) from None
        if line is _TOO_LONG:
            self.close(kill=True)
            raise PolicyError(f"answered a line over the {MAX_LINE >> 20} MB a line may be; killed {self.command!r}")
        if line is _CUT:
            self.close(kill=True)
            raise PolicyError(f"its output ended without the newline that ends an answer to {message['type']!r}")
        if line is None:  # its output ended: it exited, or closed it and lives on
            try:
                code = proc.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.close(kill=True)
                raise PolicyError(
                    f"{self.command!r} closed its output instead of answering {message['type']!r} and did not exit "
                    f"within {self.timeout:g}s; killed"
                ) from None
            raise PolicyError(f"{self.command!r} exited (code {code}) instead of answering {message['type']!r}")
        if (held := sum(map(line.count, (b",", b":", b"[", b"{")))) > values:  # each value but one follows one
            raise PolicyError(
                f"answered {message['type']!r} with a line of about {held:,} JSON values; it needs at most {values:,}"
            )
        try:
            reply = loads_standard(line)
        except NotStandard as e:
            raise PolicyError(f"answered {line[:80]!r}: {e}") from None
        except (ValueError, RecursionError):  # RecursionError: nested past the parser
            raise PolicyError(f"answered {line[:80]!r}, not a JSON line") from None
        if not isinstance(reply, dict):
            raise PolicyError(f"answered {reply!r}, not a JSON object")
        if "error" in reply:
            said = one_line(str(reply["error"]))
            raise _ErrorAnswer(f"reported an error: {said[:SAID]}{'...' if len(said) > SAID else ''}")
        if expect and sum(k in reply for k in expect) != 1:
            raise PolicyError(
                f"answered {one_line(str(sorted(reply)))[:SAID]}; expected {' or '.join(repr(k) for k in expect)}"
                + (f", not both {' and '.join(repr(k) for k in expect)}" if all(k in reply for k in expect) else "")
            )
        return reply

    def end_of_game(self) -> None:
        """A line waiting when a game ends, or queued within :data:`WAKE` seconds, answers nothing it was
        asked: it fails that game, not the next. A line written later is found at the next message."""
        if self.proc is not None and not self._broken:
            try:
                self._unasked(wait=WAKE)
            except PolicyError:
                self._broken = True
                raise

    def _unasked(self, wait: float = 0) -> None:
        """A line waiting before a message is sent (or ``wait`` seconds from now) was never asked for:
        taking it as the next answer would leave every later action one decision stale, so it fails
        the game instead."""
        try:
            line = self._lines.get(timeout=wait) if wait else self._lines.get_nowait()
        except queue.Empty:
            return
        if line is None:  # its output ended: the exchange says how (exited, or closed it and lives on)
            self._lines.put(None)
            return
        if line is _TOO_LONG or line is _CUT:
            raise PolicyError(
                f"wrote {'a line over the 64 MB' if line is _TOO_LONG else 'part of a line'} without being asked"
            )
        raise PolicyError(f"wrote {line[:80]!r} without being asked (one answer per message)")

    def _write(self, proc: subprocess.Popen, data: bytes, kind: str, timeout: float | None = None) -> None:
        """Write on a helper thread, for ``timeout`` seconds at most (the exchange's by default): a
        policy that stops reading fills the pipe, and a plain write would then wait forever."""
        timeout = self.timeout if timeout is None else timeout
        failed: list[OSError] = []

        def write() -> None:
            try:
                assert proc.stdin is not None
                proc.stdin.write(data)
                proc.stdin.flush()
            except OSError as e:  # BrokenPipeError included: it exited or closed its input
                failed.append(e)

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        for wait in _woken(timeout):
            writer.join(wait)
            if not writer.is_alive():
                break
        if writer.is_alive():
            self.close(kill=True)  # the pipe closes under the writer, which then ends
            writer.join(5)
            raise PolicyError(
                f"did not read the {kind!r} message ({len(data):,} bytes) within {timeout:g}s; killed {self.command!r}"
            )
        if failed:
            try:  # an exit is seen a moment later through the reaper
                code = proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                code = None
            raise PolicyError(f"{self.command!r} closed its input (exit code {code})")

    def reset(self, game: str, actions) -> None:
        if self._broken or (self.proc is not None and self.proc.poll() is not None):
            self.close(kill=True)  # a clean protocol state for every game: a fresh process, hello again
            self._broken = False
        reply = self._ask({"type": "reset", "game": game, "actions": list(actions)})
        if reply.get("ok") is not True:
            self._broken = True
            raise PolicyError(f'answered reset with {one_line(json.dumps(reply))[:SAID]}; expected {{"ok": true}}')

    def __call__(self, batch: Batch):
        frames = np.ascontiguousarray(np.concatenate([batch.frames, batch.prev_frames]))
        n, h, w, c = batch.frames.shape
        reply = self._ask(
            {
                "type": "act",
                "game": batch.game,
                "platform": batch.platform,  # which question the game's name asks: ale, vizdoom
                "n": n,
                "height": h,
                "width": w,
                "channels": c,
                "new_episode": batch.new_episode.tolist(),
                "episodes": batch.episodes.tolist(),
                "nbytes": frames.nbytes,
            },
            frames.tobytes(),
            expect=("actions", "probs"),
            needs=n * (len(batch.actions) + 1),
        )
        if "actions" in reply:
            acts = reply["actions"]
            if not _all_int(acts):
                return acts  # the judge's check says what it is
            if huge := [a for a in acts if not -(2**63) <= a < 2**63]:  # int64 would raise OverflowError
                raise PolicyError(f"answered action {shown(huge[0])}, out of range for {len(batch.actions)} actions")
            return np.asarray(acts, dtype=np.int64)
        probs = reply["probs"]
        if not isinstance(probs, list) or not all(isinstance(row, list) and _all_number(row) for row in probs):
            raise PolicyError("answered probabilities that are not numbers (expected n rows of numbers)")
        return np.asarray(probs, dtype=np.float64)

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if not kill and self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self._write(self.proc, b'{"type": "close"}\n', "close", CLOSE_WAIT)
                self.proc.wait(timeout=CLOSE_WAIT)
            except (PolicyError, subprocess.TimeoutExpired):
                pass
            if self.proc is None:  # the write timed out and killed it
                return
        if self._control is not None:  # the reaper ends the policy and all it started, then exits
            self._control.close()
            self._control = None
            try:
                self.proc.wait(timeout=REAPER_WAIT)
            except subprocess.TimeoutExpired:  # stopped, or slow: what follows kills it and searches
                pass
        # Then the judge's own search, for what outlived a reaper the policy killed, or where there is
        # none (laya_eval.processes); once reaped, its number is no longer its own (a zombie's is, so
        # poll() first: what it reports exited is reaped now).
        end_all(self.proc.pid if self.proc.poll() is None else None, self._mark)
        self.proc.wait()
        self.proc = None
        self._done.set()  # its reader, waiting to queue a line nobody will read, ends


def game_over(policy) -> None:
    """At a game's end: a subprocess policy's line nobody asked for fails the game it was written in,
    not the next one, nor none after the last (any other policy: nothing to do)."""
    if isinstance(policy, StdioPolicy):
        policy.end_of_game()


def _put(lines: queue.Queue, item, done: threading.Event) -> bool:
    """Queue ``item``, waiting for room; False if ``done`` is set first."""
    while not done.is_set():
        try:
            lines.put(item, timeout=WAKE)
            return True
        except queue.Full:
            pass
    return False


def _woken(timeout: float) -> Iterator[float]:
    """The waits, of :data:`WAKE` seconds at most, that make up ``timeout`` seconds from now."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        yield min(WAKE, left)


def _woken_get(lines: queue.Queue, timeout: float):
    """``lines.get(timeout=timeout)``, woken every :data:`WAKE` seconds."""
    for wait in _woken(timeout):
        try:
            return lines.get(timeout=wait)
        except queue.Empty:
            pass
    raise queue.Empty


def _all_int(xs) -> bool:
    return isinstance(xs, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in xs)


def _all_number(xs: list) -> bool:
    """Numbers, not what numpy would make one of ("1", true)."""
    return all(type(x) is float or type(x) is int for x in xs)
