"""Every benchmark in tools/bench runs in its smoke mode: its numbers are not checked (tests never
assert timings), only that it runs to its table on this machine."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def smoke(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench" / script), "--smoke", *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@pytest.mark.slow
def test_the_training_bench_measures_quiet_and_loaded_in_one_run():
    out = smoke("train.py", "--background-load", "1")
    rows = [line for line in out.splitlines() if line.startswith("| ") and "x |" in line]
    assert len(rows) == 2 and "1 thread" in rows[0], out
