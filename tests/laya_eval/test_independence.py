import json
import subprocess
import sys

WORKSPACE = ("atari_data", "laya_policy", "laya_eval", "laya_protocol")


def _imported(code: str, names) -> list[str]:
    probe = f"import json, sys; {code}; print(json.dumps(sorted(m for m in {tuple(names)!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def test_importing_laya_eval_pulls_in_nothing_it_judges():
    # laya_protocol is the one workspace package the judge shares: facts, not code it scores.
    code = (
        "import laya_eval, laya_eval.cli, laya_eval.evaluate, laya_eval.runner, laya_eval.report, "
        "laya_eval.stdio, laya_eval.doom"
    )
    assert _imported(code, ("torch", "transformers", *WORKSPACE)) == ["laya_eval", "laya_protocol"]


def test_laya_protocol_depends_on_ale_py_alone():
    code = (
        "import laya_protocol.protocol, laya_protocol.games, laya_protocol.seeds, laya_protocol.names, "
        "laya_protocol.doom, laya_protocol.config, laya_protocol.ray, laya_protocol.bars, laya_protocol.games as g; "
        "g.minimal_actions('Pong')"
    )
    heavy = ("torch", "transformers", "datasets", "polars", "vizdoom", "ray", *WORKSPACE)  # ale-py brings gymnasium
    assert _imported(code, heavy) == ["laya_protocol"]
