"""Every example in the READMEs runs as written.

Each README's ```bash and ```python blocks run in order in one scratch folder per README (so a
block may use what an earlier one wrote; two READMEs run at a time), with `packages/` and `tools/` linked in and the
workspace's console scripts on PATH; `uv run CMD` runs CMD in this environment. A block preceded
by `<!-- not run by tests: REASON -->` is skipped, and the skip says why.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [
    "README.md",
    "packages/atari-data/README.md",
    "packages/laya-eval/README.md",
    "packages/laya-policy/README.md",
]
BLOCK = re.compile(
    r"(?:<!-- not run by tests: (?P<skip>[^>]*?) -->\n+)?```(?P<lang>bash|python)\n(?P<code>.*?)```", re.S
)
PRELUDE = (
    'set -euo pipefail\nuv() { if [ "$1" = run ]; then shift; "$@"; else echo "uv $1: not run here" >&2; '
    "return 1; fi; }\n"
)


def blocks():
    for readme in READMES:
        text = (ROOT / readme).read_text()
        for m in BLOCK.finditer(text):
            line = text.count("\n", 0, m.start("code"))
            yield pytest.param(readme, m["lang"], m["code"], m["skip"], id=f"{readme}:{line}")


def run_block(cwd: Path, lang: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = ["bash", "-c", PRELUDE + code] if lang == "bash" else [sys.executable, "-c", code]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory):
    """Each selected README's blocks run in order in its own folder, two READMEs at a time: the
    commands take one core each (one torch thread per process), and the READMEs do not share files.
    Maps (readme, code) to the finished process, waited on by the test that asks for it."""
    from concurrent.futures import ThreadPoolExecutor

    wanted = {  # the READMEs of the selected tests only
        item.callspec.params["readme"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_readme_example_runs"
    }
    pool = ThreadPoolExecutor(2)
    futures = {}

    def chain(readme: str, cwd: Path) -> dict:
        text = (ROOT / readme).read_text()
        return {m["code"]: run_block(cwd, m["lang"], m["code"]) for m in BLOCK.finditer(text) if not m["skip"]}

    for readme in sorted(wanted, key=lambda r: -len((ROOT / r).read_text())):  # the longest first
        d = tmp_path_factory.mktemp("readme")
        for name in ("packages", "tools"):
            (d / name).symlink_to(ROOT / name)
        futures[readme] = pool.submit(chain, readme, d)
    yield lambda readme, code: futures[readme].result()[code]
    pool.shutdown(wait=True)


@pytest.mark.parametrize("readme,lang,code,skip", list(blocks()))
def test_readme_example_runs(readme, lang, code, skip, outcomes):
    if skip:
        pytest.skip(skip)
    done = outcomes(readme, code)
    assert done.returncode == 0, (
        f"{readme} example failed:\n{code}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    )
