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


@pytest.mark.parametrize(
    "flags,field,said",
    [
        (["--epsilon", "2"], "--epsilon", "is not a probability"),
        (["--epsilon", "nan"], "--epsilon", "is not a probability"),
        (["--seed", "-1"], "--seed", "expected 0 or more"),
        (["--seed", "5000"], "--seed", "expected at most 4,294"),
        (["--train-frames", "-5"], "--train-frames", "expected 1 or more"),
        (["--train-frames", "0", "--val-frames", "0"], "--train-frames", "expected 1 or more"),
    ],
)
def test_doom_generate_checks_its_flags_as_ale_generate_does(tmp_path, capsys, flags, field, said):
    """The vizdoom branch built its config by hand and checked nothing: NaN epsilon was recorded, a
    negative or large seed was a pybind traceback, no frames made an empty game marked ready."""
    root = tmp_path / "d"
    code = main(["generate", "--platform", "vizdoom", "--root", str(root), "--val-frames", "5", *flags])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and field in err and said in err, err
    assert not root.exists() or not any(root.rglob("*.jsonl"))


@pytest.mark.parametrize("split", ["val", "train"])
def test_doom_frames_past_a_splits_episode_numbers_are_refused_before_play(tmp_path, capsys, split):
    """Val episodes are numbered 1,000 to 1,999 and a basic episode holds at most 75 decisions: 8,000,000
    val records were played for hours into train's numbers, then refused as an episode added twice."""
    root = tmp_path / "d"
    args = ["generate", "--platform", "vizdoom", "--root", str(root), "--train-frames", "1", "--val-frames", "1"]
    args[args.index(f"--{split}-frames") + 1] = "8000000"
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"--{split}-frames" in err and "episodes of at most 75 decisions" in err and "Traceback" not in err, err
    assert not root.exists() or not any(root.rglob("*.jsonl"))


def test_doom_train_episodes_stay_below_the_judges_seeds():
    """Doom seeds an episode with seed * 1,000,003 + its number, so at --seed 0 train episode
    100,000 would be laya-eval's first evaluation episode: the train episodes' room ends before it
    (a run that needs more is refused before play, above)."""
    from laya_protocol.seeds import EVAL_SEED_BASE, TRAIN_EPISODES_FROM, episodes_room

    last = TRAIN_EPISODES_FROM + episodes_room(TRAIN_EPISODES_FROM) - 1
    assert doom.episode_seed(0, last) == last < EVAL_SEED_BASE
