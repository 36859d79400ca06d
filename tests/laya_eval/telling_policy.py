"""A stdio policy that appends every message it is sent (its JSON line) to the file argv[1] and
always chooses the first action: what a subprocess is told, for a test to read."""

import json
import sys

stdin = sys.stdin.buffer
with open(sys.argv[1], "a") as log:
    while line := stdin.readline():
        msg = json.loads(line)
        log.write(line.decode())
        log.flush()
        if msg["type"] == "close":
            break
        if msg["type"] == "act":
            stdin.read(msg["nbytes"])
            reply: dict = {"actions": [0] * msg["n"]}
        else:
            reply = {"name": "telling"} if msg["type"] == "hello" else {"ok": True}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
