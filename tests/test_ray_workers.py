"""Ray workers run this interpreter and its packages, whichever way the driver was started.

Under `uv run`, Ray (2.x) would otherwise rebuild a uv environment for its workers from a copy of the
working directory. It reads its switch for that once, when `ray` is first imported, so it must be set
before that import (`laya_protocol.ray.connect`, which both packages use); a fresh interpreter shows
whether it is.
"""

import json
import os
import subprocess
import sys

import pytest

PROBE = """
import json
from laya_eval.executors import ray_each
from atari_data.produce.executors import ray_map

def where(_=None):
    import os, sys
    return [sys.executable, os.getcwd()]

# laya-eval first: it is the one that starts Ray (and sets the switch) in this fresh interpreter.
print(json.dumps({"laya-eval": next(ray_each(where, [(0,)])), "atari-data": ray_map(where, [0])[0]}))
"""


@pytest.mark.slow
def test_ray_workers_run_the_drivers_interpreter(tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    # The driver is a child of this test, so the `uv run` that started pytest is among its ancestors.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    for package, (executable, cwd) in json.loads(done.stdout.strip().splitlines()[-1]).items():
        assert executable == sys.executable, f"{package}: a Ray worker ran another interpreter (a rebuilt uv env?)"
        assert "runtime_resources" not in cwd, f"{package}: a Ray worker ran in a copy of the working directory"
