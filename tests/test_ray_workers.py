"""Ray workers run this interpreter and its packages, whichever way the driver was started.

Under `uv run`, Ray (2.x) would otherwise rebuild a uv environment for its workers from a copy of the
working directory. It reads its switch for that once, when `ray` is first imported, so each package
must set it before that import; a fresh interpreter per case shows whether it does.
"""

import json
import subprocess
import sys

import pytest

PROBE = """
import json, os, sys
{imports}
def where(_=None):
    import os, sys
    return [sys.executable, os.getcwd()]
{call}
print(json.dumps(out))
"""

CASES = {
    "atari-data": ("from atari_data.produce.executors import ray_map", "out = ray_map(where, [0])[0]"),
    "laya-eval": ("from laya_eval.executors import ray_each", "out = next(ray_each(where, [(0,)]))"),
}


@pytest.mark.slow
@pytest.mark.parametrize("package", sorted(CASES))
def test_ray_workers_run_the_drivers_interpreter(package, tmp_path):
    pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    imports, call = CASES[package]
    script = PROBE.format(imports=imports, call=call)
    # The driver is a child of this test, so the `uv run` that started pytest is among its ancestors.
    env = {k: v for k, v in __import__("os").environ.items() if k != "RAY_ENABLE_UV_RUN_RUNTIME_ENV"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr[-2000:]
    executable, cwd = json.loads(done.stdout.strip().splitlines()[-1])
    assert executable == sys.executable, "a Ray worker ran another interpreter (a rebuilt uv environment?)"
    assert "runtime_resources" not in cwd, "a Ray worker ran in a copy of the working directory"
