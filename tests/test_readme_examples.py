"""Every example in the READMEs runs as written.

Each README's ```bash and ```python blocks run in order in one scratch folder per README (so a
block may use what an earlier one wrote), with `packages/` and `tools/` linked in and the
workspace's console scripts on PATH; `uv run CMD` runs CMD in this environment. A block preceded
by `<!-- not run by tests: REASON -->` is not run; its own test is skipped with that reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .processes import ended

ROOT = Path(__file__).resolve().parents[1]
READMES = [
    "README.md",
    "packages/atari-data/README.md",
    "packages/laya-eval/README.md",
    "packages/laya-policy/README.md",
    "packages/laya-protocol/README.md",
]
BLOCK = re.compile(
    r"(?:<!-- not run by tests: (?P<skip>[^>]*?) -->\n+)?```(?P<lang>bash|python)\n(?P<code>.*?)```", re.S
)
PRELUDE = (
    'set -euo pipefail\nuv() { if [ "$1" = run ]; then shift; "$@"; else echo "uv $1: not run here" >&2; '
    "return 1; fi; }\n"
)


def blocks(readme: str):
    """(line, lang, code, skip reason or None) of each ```bash or ```python block, in order."""
    text = (ROOT / readme).read_text()
    for m in BLOCK.finditer(text):
        yield text.count("\n", 0, m.start("code")), m["lang"], m["code"], m["skip"]


def run_block(cwd: Path, lang: str, code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", "MPLBACKEND": "Agg"}
    cmd = ["bash", "-c", PRELUDE + code] if lang == "bash" else [sys.executable, "-c", code]
    # A block takes seconds to a minute; a hang is killed whole (every process under it) at five.
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = ended(proc, timeout=300)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@pytest.mark.parametrize("readme", READMES)
def test_readme_examples_run_in_order(readme, tmp_path):
    """One test per README, so one worker runs its chain: a block may need what an earlier one wrote.
    The first failing block fails the test, named by its line."""
    for name in ("packages", "tools"):
        (tmp_path / name).symlink_to(ROOT / name)
    ran = 0
    for line, lang, code, skip in blocks(readme):
        if skip:
            continue
        done = run_block(tmp_path, lang, code)
        assert done.returncode == 0, (
            f"{readme}:{line} example failed:\n{code}\n--- stdout\n{done.stdout[-3000:]}\n"
            f"--- stderr\n{done.stderr[-3000:]}"
        )
        ran += 1
    assert ran, f"{readme}: no example ran"


@pytest.mark.parametrize(
    "reason",
    [pytest.param(skip, id=f"{readme}:{line}") for readme in READMES for line, _, _, skip in blocks(readme) if skip],
)
def test_an_example_not_run_says_why(reason):
    assert reason.strip(), "an empty reason"
    pytest.skip(reason)
