"""Stops from outside: SIGTERM and SIGHUP raised as :class:`Terminated` by ``terminations_raised``."""

import signal
import subprocess
import sys
import time

SWALLOWS = """
import time
import laya_protocol.errors as errors

errors.GRACE_SECONDS = 1.0


class Finalised:
    def __del__(self):  # the SIGTERM lands here, and Python drops what a __del__ raises
        print("ready", flush=True)
        time.sleep(5)


@errors.terminations_raised()
def main():
    Finalised()
    while True:
        time.sleep(0.05)


main()
"""


def test_a_stop_that_is_swallowed_still_ends_the_process_after_the_grace():
    """A Terminated raised inside a ``__del__`` is printed and dropped; the process must end all the
    same (later SIGTERMs are ignored, so that a second cannot cut a clean-up short)."""
    p = subprocess.Popen([sys.executable, "-c", SWALLOWS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None and p.stdout.readline().strip() == "ready"
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        code = p.wait(timeout=30)
    finally:
        p.kill()
    assert code == 128 + signal.SIGTERM and time.monotonic() - t < 10
    assert "Exception ignored" in p.stderr.read(), "the Terminated was not swallowed: the test tests nothing"


RAISED_IN_ITS_PLACE = """
import os, signal, time
import laya_protocol.errors as errors


@errors.terminations_raised()
def stopped_inside_c_code():
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except errors.Terminated:
        raise KeyboardInterrupt from None  # what Ray's ray.get raises in its place


@errors.terminations_raised()
def a_later_ctrl_c():
    raise KeyboardInterrupt


for command in (stopped_inside_c_code, a_later_ctrl_c):
    try:
        command()
    except KeyboardInterrupt as e:
        print(*errors.stopped(e), sep=": ")
"""


def test_a_stop_is_told_as_such_when_c_code_raised_a_plain_keyboardinterrupt_in_its_place():
    """Ray's ``ray.get`` turned the Terminated raised in it into a bare KeyboardInterrupt, and a
    SIGTERM was reported as a Ctrl-C (exit 130); a later command's Ctrl-C in the same process is one."""
    done = subprocess.run([sys.executable, "-c", RAISED_IN_ITS_PLACE], capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["terminated (SIGTERM): 143", "interrupted: 130"], done.stderr
