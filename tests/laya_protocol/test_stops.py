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
