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

Standard error passes through. A reply that takes longer than the timeout gets the process
killed and the game recorded as failed.
"""

from __future__ import annotations

import json
import queue
import shlex
import subprocess
import threading

import numpy as np

from laya_eval.batch import Batch, PolicyError

PROTOCOL_VERSION = 1


class StdioPolicy:
    def __init__(self, command: str, timeout: float = 60.0):
        self.command, self.timeout = command, timeout
        self.proc: subprocess.Popen | None = None
        self.identity: dict = {}

    def _start(self) -> None:
        try:
            self.proc = subprocess.Popen(
                shlex.split(self.command), stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0
            )
        except OSError as e:
            raise PolicyError(f"cannot start {self.command!r}: {e}") from None
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, args=(self.proc.stdout, self._lines), daemon=True).start()
        self.identity = self._ask({"type": "hello", "protocol": PROTOCOL_VERSION})

    @staticmethod
    def _read(stream, lines: queue.Queue) -> None:
        for line in iter(stream.readline, b""):
            lines.put(line)
        lines.put(None)

    def _ask(self, message: dict, payload: bytes = b"") -> dict:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                raise PolicyError(f"{self.command!r} exited with code {self.proc.returncode}")
            self._start()
        proc = self.proc
        assert proc is not None and proc.stdin is not None  # _start raises when it cannot start one
        try:
            proc.stdin.write(json.dumps(message).encode() + b"\n" + payload)
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise PolicyError(f"{self.command!r} closed its input (exit code {proc.poll()})") from None
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            self.close(kill=True)
            raise PolicyError(
                f"no answer to {message['type']!r} within {self.timeout:g}s; killed {self.command!r}"
            ) from None
        if line is None:
            raise PolicyError(f"{self.command!r} exited (code {proc.wait()}) instead of answering {message['type']!r}")
        try:
            reply = json.loads(line)
        except ValueError:
            raise PolicyError(f"answered {line[:80]!r}, not a JSON line") from None
        if not isinstance(reply, dict):
            raise PolicyError(f"answered {reply!r}, not a JSON object")
        if "error" in reply:
            raise PolicyError(f"reported an error: {reply['error']}")
        return reply

    def reset(self, game: str, actions) -> None:
        self._ask({"type": "reset", "game": game, "actions": list(actions)})

    def __call__(self, batch: Batch):
        frames = np.ascontiguousarray(np.concatenate([batch.frames, batch.prev_frames]))
        n, h, w, c = batch.frames.shape
        reply = self._ask(
            {
                "type": "act",
                "game": batch.game,
                "n": n,
                "height": h,
                "width": w,
                "channels": c,
                "new_episode": batch.new_episode.tolist(),
                "episodes": batch.episodes.tolist(),
                "nbytes": frames.nbytes,
            },
            frames.tobytes(),
        )
        if "actions" in reply:
            return np.asarray(reply["actions"], dtype=np.int64) if _all_int(reply["actions"]) else reply["actions"]
        if "probs" in reply:
            return np.asarray(reply["probs"], dtype=np.float64)
        raise PolicyError(f"answered {sorted(reply)}; expected 'actions' or 'probs'")

    def close(self, kill: bool = False) -> None:
        if self.proc is None:
            return
        if not kill and self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write(b'{"type": "close"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def _all_int(xs) -> bool:
    return isinstance(xs, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in xs)
