"""ViZDoom basic: the labels-buffer expert, and its data in the frozen schema."""

import pytest

pytest.importorskip("vizdoom", reason="ViZDoom is an optional extra (atari-data[vizdoom])")

from atari_data.cli import main
from atari_data.layout import list_games
from atari_data.layout.validate import validate
from atari_data.play import doom


@pytest.fixture(scope="module")
def game():
    g = doom.make_game("basic")
    yield g
    g.close()


def test_the_expert_beats_random_and_always_attack(game):
    names = doom.buttons(game)
    assert names == ["MOVE_LEFT", "MOVE_RIGHT", "ATTACK"]
    seeds = range(100_000, 100_020)
    expert = doom.episode_scores(game, seeds, doom.epsilon_expert(0.0, 3))
    rnd = doom.episode_scores(game, seeds, lambda s, e, r: int(r.integers(3)))
    attack = doom.episode_scores(game, seeds, lambda s, e, r: names.index("ATTACK"))
    assert expert["kill_rate"] == 1.0 and expert["mean"] > 60
    assert expert["mean"] > rnd["mean"] > attack["mean"]


def test_generate_writes_doom_records_in_the_frozen_schema(tmp_path, capsys):
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        assert (
            main(
                [
                    "generate",
                    "--platform",
                    "vizdoom",
                    "--scenario",
                    "basic",
                    "--root",
                    str(root),
                    "--train-frames",
                    "40",
                    "--val-frames",
                    "10",
                ]
            )
            == 0
        )
    assert "doom_basic/DoomBasic:" in capsys.readouterr().out
    report = validate(roots[0], images=True)
    assert report.ok, [d.render() for d in report.defects]
    g = list_games(roots[0])[0]
    meta = g.meta()
    assert (meta["platform"], meta["frame_format"], meta["frames"]) == ("vizdoom", "rgb_240x320", 2)
    assert meta["actions"] == ["MOVE_LEFT", "MOVE_RIGHT", "ATTACK"]
    train = list(g.records("train"))
    assert 0 < len(train) <= 40 and len(list(g.records("val"))) > 0
    assert "Doom scenario DoomBasic" in train[0]["question"]["instructions"]
    assert train[0]["question"]["criteria"] == {
        "MOVE_LEFT": "strafe left",
        "MOVE_RIGHT": "strafe right",
        "ATTACK": "shoot",
    }
    assert {r["label"] for r in train} <= {0, 1, 2} and len({r["label"] for r in train}) > 1
    other = list_games(roots[1])[0]
    assert (g.path / "train.jsonl").read_bytes() == (other.path / "train.jsonl").read_bytes(), "same seed, same bytes"
    assert (g.path / train[3]["image"]).read_bytes() == (other.path / train[3]["image"]).read_bytes()
