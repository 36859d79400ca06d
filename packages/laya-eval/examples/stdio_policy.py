#!/usr/bin/env python3
"""A third-party policy for laya-eval, written against the stdio protocol only.

It imports nothing from laya-eval (only numpy), so it stands for a policy in any language:
read one JSON line per message, read the frame bytes that follow an "act" message, answer with
one JSON line. This one moves toward the brightest column of the screen's lower half, and
presses FIRE when it can.

    laya-eval run --policy "cmd:python packages/laya-eval/examples/stdio_policy.py" --games Breakout
"""

import json
import sys

import numpy as np


def choose(frames: np.ndarray, actions: list[str]) -> list[int]:
    out = []
    for frame in frames:
        lower = frame[frame.shape[0] // 2 :].astype(np.int32).sum(axis=(0, 2))
        target = int(np.argmax(lower)) / frame.shape[1]
        if "FIRE" in actions and np.random.random() < 0.1:
            out.append(actions.index("FIRE"))
        elif target < 0.45 and "LEFT" in actions:
            out.append(actions.index("LEFT"))
        elif target > 0.55 and "RIGHT" in actions:
            out.append(actions.index("RIGHT"))
        else:
            out.append(0)
    return out


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout
    actions: list[str] = []
    np.random.seed(0)
    while True:
        line = stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        if msg["type"] == "hello":
            reply = {"name": "brightest-column", "version": 1}
        elif msg["type"] == "reset":
            actions = msg["actions"]
            reply = {"ok": True}
        elif msg["type"] == "act":
            raw = stdin.read(msg["nbytes"])
            shape = (2 * msg["n"], msg["height"], msg["width"], msg["channels"])
            frames = np.frombuffer(raw, dtype=np.uint8).reshape(shape)[: msg["n"]]  # current, then previous
            reply = {"actions": choose(frames, actions)}
        elif msg["type"] == "close":
            return
        else:
            reply = {"error": f"unknown message type {msg['type']!r}"}
        stdout.write(json.dumps(reply) + "\n")
        stdout.flush()


if __name__ == "__main__":
    main()
