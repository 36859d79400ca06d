"""The random `tiny` preset learns a decision that depends on where something is on the screen.

ViZDoom basic is the cleanest such case: strafe toward the monster, shoot when it covers the
crosshair. A head that cannot form "this option x that place" settles on equal scores here
(validation NLL stays at ln 3), so this guards the head's design and the tiny learning rates.
"""

import json
import math

import pytest

pytest.importorskip("vizdoom", reason="ViZDoom is an optional extra (atari-data[vizdoom])")

from atari_data.cli import main as atari_data
from laya_policy.settings import TrainConfig
from laya_policy.train import train


def test_tiny_learns_where_the_monster_is(tmp_path):
    data = tmp_path / "doom"
    assert (
        atari_data(
            [
                "generate",
                "--platform",
                "vizdoom",
                "--scenario",
                "basic",
                "--root",
                str(data),
                "--train-frames",
                "600",
                "--val-frames",
                "128",
                "--baseline-episodes",
                "0",
            ]
        )
        == 0
    )
    out = tmp_path / "run"
    train(TrainConfig(data=str(data), out=str(out), steps=150, evals=1, eval_records=128), progress=False)
    last = json.loads((out / "log.jsonl").read_text().splitlines()[-1])
    scores = last["games"]["DoomBasic"]
    assert scores["nll"] < 0.7 * math.log(3), scores
    assert scores["accuracy"] >= 0.75, scores
