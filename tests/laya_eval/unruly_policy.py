"""A stdio policy that misbehaves on purpose, one way per mode (argv[1]); argv[2] is a scratch folder.

deaf      answers hello and reset, then never reads its input again (the frames fill the pipe)
crash     exits with code 3 at its first act, the first time it runs; behaves when started again
stray     prints a stray line before its first answer to act, the first time it runs
forks     starts a child that would live an hour, writes its pid, then never answers act
setsid    as forks, its child in a session of its own (out of the policy's process group)
daemon    as setsid, started by a launcher that exits at once (a double fork: the child has no parent)
groupkill starts a child in a session of its own with an empty environment, writes its pid and plays
          on; at close it kills its own process group (a shell's `trap 'kill 0' EXIT`)
holdfd    as setsid, its child's environment empty, after opening for writing whatever of its
          parent's descriptors /proc lets it (to keep the judge's end of a pipe open)
forkloop  as setsid, its child forking and exiting in a loop, so its number keeps changing; each
          writes its pid to <scratch>/loop.pid, and the loop ends itself 20 s after it began
odd       answers its first act with an object that has neither actions nor probs, the first time it runs
mute      closes its output at its first act and lives on without a word
deep      answers hello with an array nested 30,000 deep (past the parser, within the values a line may hold)
twice     answers its first act twice, the first time it runs (every later answer would be one act stale)
nan       answers hello with NaN and 1e999 in its identity (not standard JSON; the results would not be)
big       answers its first act with 16 MB of padding beside its actions (read a byte at a time: 10 s)
endless   answers its first act with 65 MB and no newline, then waits
flood     at close, writes lines of 8 MB without end instead of exiting (nobody asked for them)
bigname   answers hello with a name of 40,000 'é' (240 KB as the results file escapes it)
hugeact   answers every act with the action 10**30
cut       answers its first act without the newline that ends a line, then exits
forge     at close, replaces the results file $UNRULY_OUT with one that says it scored 21 (the judge
          waits for it to exit, so it lived past the judge's last write)
saywhat   answers every reset with an error of 1 MB led by a terminal escape, a carriage return and a
          right-to-left override (the judge writes it into the results and prints it)
dupkey    answers every act with "actions" given twice: out of range first, then 0 (readers disagree
          on which counts)
both      answers every act with both actions and probs
strprobs  answers every act with probabilities written as strings ("1")
boolprobs answers every act with probabilities written as booleans
notok     answers every reset with {"ok": false}
manyempty answers every act with probs of 300,000 empty rows (a few MB that parse into as many lists)
lasttwice answers Pong's act number $UNRULY_LAST twice (its last decision at that cap)
Every mode appends a line to <scratch>/hellos each time it is greeted, so a test can count processes.
Any other mode behaves; each answers hello with {"name": $UNRULY_NAME, or the mode}, and its pid
too where $UNRULY_PID is set (an identity that changes when the process is started again).
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

mode, scratch = sys.argv[1], Path(sys.argv[2])
first_life = not (scratch / f"{mode}.ran").exists()
(scratch / f"{mode}.ran").write_text("")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(3600)"]


def start_child(**popen) -> None:
    """A child that would live an hour, its pid written where the test looks for it."""
    child = subprocess.Popen(SLEEPER, **popen)
    (scratch / "child.pid").write_text(str(child.pid))


acts = 0
for line in sys.stdin.buffer:
    msg = json.loads(line)
    if msg["type"] == "close":
        if mode == "forge":
            out = Path(os.environ["UNRULY_OUT"])
            forged = json.loads(out.read_text())
            for g in forged["games"].values():
                g["scores"] = [21.0] * len(g["scores"])
            out.with_name("forged.tmp").write_text(json.dumps(forged))
            os.replace(out.with_name("forged.tmp"), out)
        if mode == "groupkill":
            os.killpg(0, 15)
        while mode == "flood":
            sys.stdout.buffer.write(b"x" * (8 << 20) + b"\n")
        break
    if msg["type"] == "act":
        if mode == "deaf":
            time.sleep(3600)
        sys.stdin.buffer.read(msg["nbytes"])
        if mode == "mute":
            os.close(1)
            time.sleep(3600)
        if mode == "crash" and first_life:
            sys.exit(3)
        if mode == "stray" and first_life:
            print("loading weights...", flush=True)
            first_life = False
        if mode == "odd" and first_life:
            sys.stdout.write(json.dumps({"foo": 1}) + "\n")
            sys.stdout.flush()
            first_life = False
            continue
        if mode == "twice" and first_life:
            answer = json.dumps({"actions": [0] * msg["n"]}) + "\n"
            sys.stdout.write(answer + answer)  # one write: both lines are there before the next message
            sys.stdout.flush()
            first_life = False
            continue
        if mode == "cut":
            sys.stdout.write(json.dumps({"actions": [0] * msg["n"]}))
            sys.stdout.flush()
            sys.exit(0)
        if mode == "endless":
            sys.stdout.buffer.write(b"x" * (65 << 20))
            sys.stdout.flush()
            time.sleep(3600)
        if mode == "big" and first_life:
            sys.stdout.write(json.dumps({"actions": [0] * msg["n"], "pad": "x" * (16 << 20)}) + "\n")
            sys.stdout.flush()
            first_life = False
            continue
        if mode in ("forks", "setsid"):
            start_child(start_new_session=mode == "setsid")
            time.sleep(3600)
        if mode == "daemon":
            launch = (
                "import subprocess, sys; "
                "sleeper = [sys.executable, '-c', 'import time; time.sleep(3600)']; "
                "p = subprocess.Popen(sleeper, start_new_session=True); "
                "open(sys.argv[1], 'w').write(str(p.pid))"
            )
            subprocess.run([sys.executable, "-c", launch, str(scratch / "child.pid")], check=True)
            time.sleep(3600)
        if mode == "groupkill" and first_life:
            start_child(start_new_session=True, env={})
            first_life = False
        if mode == "holdfd":
            held = []
            for fd in os.listdir(f"/proc/{os.getppid()}/fd"):
                try:
                    held.append(os.open(f"/proc/{os.getppid()}/fd/{fd}", os.O_WRONLY))
                except OSError:
                    pass
            start_child(start_new_session=True, env={})
            time.sleep(3600)
        if mode == "forkloop":
            loop = (
                "import os, sys, time; "
                "os.setsid(); fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT); end = time.time() + 20\n"
                "while time.time() < end:\n"
                "    os.pwrite(fd, b'%-12d' % os.getpid(), 0)\n"
                "    if os.fork(): os._exit(0)\n"
            )
            subprocess.Popen([sys.executable, "-c", loop, str(scratch / "loop.pid")])
            time.sleep(3600)
        acts += 1
        n, k = msg["n"], 6  # rows of Pong's six actions
        raw = {
            "dupkey": f'{{"actions": {[99] * n}, "actions": {[0] * n}}}',
            "both": json.dumps({"actions": [0] * n, "probs": [[1] + [0] * (k - 1)] * n}),
            "strprobs": json.dumps({"probs": [["1"] + [0] * (k - 1)] * n}),
            "boolprobs": json.dumps({"probs": [[True] + [False] * (k - 1)] * n}),
            "manyempty": '{"probs": [' + "[]," * 300_000 + "[]]}",
        }.get(mode)
        if raw is not None:
            sys.stdout.write(raw + "\n")
            sys.stdout.flush()
            continue
        reply = {"actions": [10**30 if mode == "hugeact" else 0] * msg["n"]}
        if mode == "lasttwice" and msg["game"] == "Pong" and acts == int(os.environ["UNRULY_LAST"]):
            sys.stdout.write(json.dumps(reply) + "\n")
    else:
        if msg["type"] == "hello":
            with open(scratch / "hellos", "a") as f:
                f.write("hello\n")
        name = "\u00e9" * 40_000 if mode == "bigname" else os.environ.get("UNRULY_NAME", mode)
        reply = {"name": name} if msg["type"] == "hello" else {"ok": True}
        if msg["type"] == "hello" and os.environ.get("UNRULY_PID"):
            reply["pid"] = os.getpid()
        if msg["type"] == "reset" and mode == "saywhat":
            reply = {"error": "\x1b[2J\rall games passed\u202e" + "E" * (1 << 20)}
        if msg["type"] == "reset":
            acts = 0  # counted per game
        if msg["type"] == "reset" and mode == "notok":
            reply = {"ok": False}
        if mode == "nan" and msg["type"] == "hello":
            sys.stdout.write('{"name": NaN, "big": 1e999}\n')
            sys.stdout.flush()
            continue
        if mode == "deep" and msg["type"] == "hello":
            sys.stdout.write("[" * 30_000 + "]" * 30_000 + "\n")
            sys.stdout.flush()
            continue
    sys.stdout.write(json.dumps(reply) + "\n")
    sys.stdout.flush()
