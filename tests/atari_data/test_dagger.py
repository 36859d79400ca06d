import numpy as np
import pytest

from atari_data.errors import AtariDataError
from atari_data.layout import GameDir
from atari_data.layout.validate import validate
from atari_data.produce.dagger import DaggerConfig, write_dagger_round


def test_dagger_round_writes_labelled_two_frame_records(tmp_path):
    calls = []

    def policy(frames, game, actions):
        calls.append((frames[0].copy(), frames[1].copy()))
        return np.full(len(actions), 1 / len(actions))  # a learner that knows nothing yet

    cfg = DaggerConfig(
        root=str(tmp_path), round=1, games=["Breakout"], train_frames=150, val_frames=20, decision_cap=200
    )
    metas = write_dagger_round(cfg, policy)
    meta = metas["Breakout"]
    assert meta["source"] == "dagger1" and meta["frames"] == 2
    assert validate(tmp_path, images=True).ok

    # The learner saw frames by the two-frame rule: [previous decision's frame, current frame].
    assert np.array_equal(calls[0][0], calls[0][1])
    assert np.array_equal(calls[1][0], calls[0][1])

    g = GameDir(tmp_path, "dagger1", "Breakout")
    recs = sorted(g.records("train"), key=lambda r: (r["episode"], r["step"]))
    for r in recs:
        prov = r["provenance"]
        assert set(prov) == {"played", "return_to_go", "episode_score"}
        assert r["label"] == int(np.argmax(r["target"]))  # the expert's label, not the learner's move
        assert 0 <= prov["return_to_go"] <= prov["episode_score"]  # Breakout rewards are non-negative
    first = [r for r in recs if r["step"] == 0]
    assert all(r["provenance"]["return_to_go"] == r["provenance"]["episode_score"] for r in first)
    differ = sum(r["provenance"]["played"] != r["label"] for r in recs)
    assert differ > len(recs) / 3, "a uniform learner mostly disagrees with the expert"
    assert write_dagger_round(cfg, policy) == {"Breakout": None}  # complete: left alone
    assert "learner a policy (sampled)" in meta["origin"], meta["origin"]
    # A round is one learner's: another checkpoint, or greedy play, does not add games beside it.
    with pytest.raises(AtariDataError, match="written by another player"):
        write_dagger_round(cfg, policy, learner="runs/b/final")
    with pytest.raises(AtariDataError, match="written by another player"):
        write_dagger_round(DaggerConfig(**{**vars(cfg), "greedy": True}), policy)
    # the refusal names what differs: it showed the learner twice when the expert was the difference
    with pytest.raises(AtariDataError, match=r"expert builtin, .*; this command's is \(.*expert planner"):
        write_dagger_round(DaggerConfig(**{**vars(cfg), "expert": "planner"}), policy)
    # Checked before anything is played: another player's Pong is not written beside its Breakout.
    both = DaggerConfig(**{**vars(cfg), "games": ["Pong", "Breakout"]})
    with pytest.raises(AtariDataError, match="written by another player"):
        write_dagger_round(both, policy, learner="runs/b/final")
    assert not (tmp_path / "dagger1" / "Pong").exists()
    # From an outside review: every game of the round counts, not only those asked for (another
    # player's Pong went in beside this one's Breakout, exit 0), and --force redoes only its own.
    pong = DaggerConfig(**{**vars(cfg), "games": ["Pong"]})
    for asked in (pong, DaggerConfig(**{**vars(pong), "force": True})):
        with pytest.raises(AtariDataError, match="dagger1/Breakout was written by another player"):
            write_dagger_round(asked, policy, learner="runs/b/final")
    assert not (tmp_path / "dagger1" / "Pong").exists()


def test_a_round_is_written_by_one_process_at_a_time(tmp_path):
    """From an outside review: two rounds at once, and the second found the first's Pong written when
    it came to it ("already written", exit 0): its round held another checkpoint's game. A later
    review ran two at once on different games, each of which found the other's not yet ready: a
    round of two players. Another writer of the round is now refused while one holds it."""

    def uniform(frames, game, actions):
        return np.full(len(actions), 1 / len(actions))

    small = {"root": str(tmp_path), "round": 1, "train_frames": 20, "val_frames": 5, "decision_cap": 30}
    other = DaggerConfig(**small, games=["Pong"])
    calls = []

    def meanwhile(frames, game, actions):  # while this round plays Breakout, another player writes Pong
        if not calls:
            write_dagger_round(other, uniform, learner="runs/a/final")
        calls.append(game)
        return uniform(frames, game, actions)

    with pytest.raises(
        AtariDataError, match=r"\.dagger1\.lock: .*another process \(pid \d+\) is writing DAgger round 1"
    ):
        write_dagger_round(DaggerConfig(**small, games=["Breakout", "Pong"]), meanwhile, learner="runs/b/final")
    assert not (tmp_path / "dagger1" / "Pong").exists() and not (tmp_path / "dagger1" / "Breakout").exists()


def test_a_round_past_the_last_that_fits_the_seed_ranges_is_refused_before_playing(tmp_path):
    cfg = DaggerConfig(root=str(tmp_path), round=20, games=["Pong"], train_frames=20, val_frames=5, decision_cap=30)
    with pytest.raises(AtariDataError, match=r"round: DAgger round 20: expected 1 to 19"):
        write_dagger_round(cfg, lambda frames, game, actions: np.ones(len(actions)) / len(actions))
    assert not list(tmp_path.iterdir())


def test_what_the_seed_ranges_or_meta_json_cannot_hold_is_refused_before_playing(tmp_path):
    """From an outside review: 9,000 train episodes (a round's numbers hold 8,000) and a seed past
    int64 (meta.json's integers) were refused only after every episode was played."""
    small = {"root": str(tmp_path), "round": 1, "games": ["Pong"], "val_frames": 5, "decision_cap": 30}
    refused = {
        "--min-train-episodes": dict(train_frames=20, min_train_episodes=9_000),
        "--train-frames": dict(train_frames=8_001 * 30),
        "--val-frames": dict(train_frames=20, val_frames=1_001 * 30),
        "--seed": dict(train_frames=20, seed=2**63),
    }
    for flag, kw in refused.items():
        with pytest.raises(AtariDataError, match=f"^{flag}: "):
            DaggerConfig(**{**small, **kw})
    DaggerConfig(**{**small, "train_frames": 8_000 * 30, "seed": 2**63 - 1})  # the largest that fit
    assert not list(tmp_path.iterdir())


def test_a_broken_policy_is_a_clear_error(tmp_path):
    cfg = DaggerConfig(root=str(tmp_path), round=2, games=["Pong"], train_frames=20, val_frames=5, decision_cap=30)
    # the learner and the game named (an outside review: NaN weights were "policy: policy returned
    # array([nan, ...])", naming neither the checkpoint nor the game)
    with pytest.raises(AtariDataError, match=r"^checkpoint abc: policy: on Pong returned array\(\[nan"):
        write_dagger_round(cfg, lambda frames, game, actions: np.array([np.nan] * len(actions)), "checkpoint abc")
    with pytest.raises(AtariDataError, match="on Pong returned"):
        write_dagger_round(cfg, lambda frames, game, actions: np.ones(3))
    assert not (tmp_path / "dagger2" / "Pong").exists()


def test_probabilities_as_large_as_a_float_holds_are_drawn_as_their_ratios(tmp_path):
    """From an outside review: the judge scales a row by its largest entry first; DAgger summed it,
    so a learner saying 1e308 for every move (uniform) had a sum of inf, all zeros after dividing,
    and the last move played at every decision, silently."""

    def played(scale: float, folder: str) -> list[int]:
        def learner(frames, game, actions):
            return np.full(len(actions), scale)

        cfg = DaggerConfig(
            root=str(tmp_path / folder), round=1, games=["Pong"], train_frames=20, val_frames=5, decision_cap=30
        )
        write_dagger_round(cfg, learner)
        g = GameDir(tmp_path / folder, "dagger1", "Pong")
        return [r["provenance"]["played"] for s in ("train", "val") for r in g.records(s)]

    uniform = played(1.0, "one")
    assert len(set(uniform)) > 1, "a uniform learner's moves vary"
    assert played(1e308, "huge") == uniform
