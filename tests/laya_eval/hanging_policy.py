"""A stdio policy that answers hello and reset, then never answers an act message."""

import json
import sys
import time

for line in sys.stdin.buffer:
    msg = json.loads(line)
    if msg["type"] == "act":
        sys.stdin.buffer.read(msg["nbytes"])
        time.sleep(3600)
    sys.stdout.write(json.dumps({"name": "hang"} if msg["type"] == "hello" else {"ok": True}) + "\n")
    sys.stdout.flush()
