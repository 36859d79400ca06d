"""Stops from outside: SIGTERM and SIGHUP raised as :class:`Terminated` by ``terminations_raised``."""

import signal
import subprocess
import sys
import time

SWALLOWS = """
import sys, time
import laya_protocol.errors as errors

errors.GRACE_SECONDS = 1.0


@errors.terminations_raised()
def main():
    print("ready", flush=True)
    while True:
        try:
            time.sleep(0.05)
        except BaseException:  # the Terminated lost, as in a __del__ the garbage collector runs
            print("swallowed", flush=True)


main()
"""


def test_a_stop_that_is_swallowed_still_ends_the_process_after_the_grace():
    """A Terminated raised inside a ``__del__`` is printed and dropped; the process must end all the
    same (later SIGTERMs are ignored, so that a second cannot cut a clean-up short)."""
    p = subprocess.Popen([sys.executable, "-c", SWALLOWS], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        code = p.wait(timeout=30)
    finally:
        p.kill()
    assert code == 128 + signal.SIGTERM and time.monotonic() - t < 10
    assert p.stdout.read().split() == ["swallowed"]
