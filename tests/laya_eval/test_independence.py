import subprocess
import sys

from atari_data.actions import minimal_actions as data_minimal
from atari_data.protocol import Protocol
from laya_eval.games import minimal_actions
from laya_eval.protocol import EvalProtocol


def test_importing_laya_eval_pulls_in_nothing_it_judges():
    code = ("import sys, laya_eval, laya_eval.cli, laya_eval.evaluate, laya_eval.runner, laya_eval.report, "
            "laya_eval.stdio; print(sorted(m for m in ('torch', 'transformers', 'atari_data', 'laya_policy') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_action_sets_and_protocol_agree_with_atari_data():
    for game in ("Pong", "Breakout", "MsPacman", "Boxing", "Freeway", "Seaquest"):
        assert minimal_actions(game) == data_minimal(game)
    assert EvalProtocol.ale_v5("Pong", decision_cap=4500).to_dict().keys() == Protocol.ale_v5("Pong").to_dict().keys()
    ours, theirs = EvalProtocol.ale_v5("Pong").to_dict(), Protocol.ale_v5("Pong").to_dict()
    assert {k: v for k, v in ours.items() if k != "decision_cap"} == {
        k: v for k, v in theirs.items() if k != "decision_cap"}
