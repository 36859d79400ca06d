import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import atari_data.produce.generate as gen
from atari_data.errors import AtariDataError
from atari_data.layout import GameDir
from atari_data.layout.validate import validate
from atari_data.play.ale import AtariGame
from atari_data.play.experts import load_expert
from atari_data.play.experts.builtin import joystick, joystick_probs

from .conftest import small_config, tree_bytes


def test_records_carry_expert_targets_labels_and_played_moves(layout_master):
    for g in (GameDir(layout_master, "expert2f", "Breakout"), GameDir(layout_master, "expert", "Pong")):
        recs = list(g.records("train")) + list(g.records("val"))
        assert recs
        differ = 0
        for r in recs:
            t = np.array(r["target"])
            assert abs(t.sum() - 1) < 1e-4 and (t >= 0).all()
            assert r["label"] == int(np.argmax(t))
            played = r["provenance"]["played"]
            assert 0 <= played < len(r["actions"])
            differ += played != r["label"]
        assert differ > 0, "sampling and epsilon make the played move differ from the label sometimes"
        assert differ < len(recs) / 2


def test_meta_has_protocol_and_baselines(layout_master):
    meta = GameDir(layout_master, "expert2f", "Breakout").meta()
    b = meta["baselines"]
    assert b["expert"] == "builtin"
    for who in ("expert", "random"):
        assert len(b[f"{who}_scores"]) == 1
        assert b[f"{who}_score"] == pytest.approx(np.mean(b[f"{who}_scores"]))
        assert f"{who}_score_cap4500" not in b, "episodes capped at 150 decisions give no cap-4500 score"
    assert b["protocol"] == meta["protocol"]
    assert meta["protocol"]["decision_cap"] == 150 and meta["frames"] == 2


def test_meta_records_the_emulator_replay_and_evaluation_depend_on(layout_master, packed):
    """ale-py's version and the MD5 of the very ROM file ale-py loads, in meta.json and the card."""
    import hashlib

    import ale_py
    from ale_py import roms

    meta = GameDir(layout_master, "expert2f", "Breakout").meta()
    rom = hashlib.md5(open(roms.get_rom_path("breakout"), "rb").read()).hexdigest()
    assert meta["emulator"] == {"ale_py": ale_py.__version__, "rom_md5": rom}
    card = (packed / "README.md").read_text()
    assert "| `expert2f-Breakout` |" in card and f"| {ale_py.__version__} | `{rom}` |" in card


@pytest.mark.parametrize("game", ["Breakout", "Boxing", "Pong"])
def test_builtin_expert_beats_random(tmp_path, game):
    cfg = small_config(tmp_path, decision_cap=1500, baseline_episodes=2)
    game_ = AtariGame(game, gen.Protocol.ale_v5(game, decision_cap=1500))
    b = gen.measure_baselines(game_, load_expert("builtin", game), cfg)
    assert b["expert_score"] > b["random_score"] + 5, b
    # each score is its episodes' mean, shown on scores that differ (one episode's mean is any of them)
    assert any(len(set(b[f"{who}_scores"])) == 2 for who in ("expert", "random")), b
    for who in ("expert", "random"):
        assert b[f"{who}_score"] == pytest.approx(np.mean(b[f"{who}_scores"])), b


def test_the_freeway_expert_waits_for_cars_and_beats_always_up():
    """Lane-aware: it stops (or steps back) for cars, so it crosses more often than holding UP."""
    from atari_data.play.ale import episode_seed, play_episode

    def play(choose_for) -> tuple[float, set]:
        game, moves = AtariGame("Freeway"), set()
        choose = choose_for(game)
        for _, move in play_episode(game, episode_seed(0, "Freeway", 1), choose, 800):
            moves.add(move)
        return game.score, moves

    expert = load_expert("builtin", "Freeway")
    up, _ = play(lambda g: lambda _d: g.actions.index("UP"))
    smart, moves = play(lambda g: lambda _d: int(np.argmax(expert.probs(g))))
    assert smart >= up + 2, (smart, up)
    assert moves != {1}, "it waits sometimes"


def test_the_freeway_experts_lanes_explain_every_collision():
    """The expert's lane bands (and the chicken's reach into the lane below) held against the
    emulator, frame by frame: whenever a car pushes the chicken back in random upward play, a lane
    the expert names for the chicken's y has its car within REACH px of the chicken. And the map
    names no more than that: one lane in a band's middle, two at most anywhere."""
    from ale_py import ALEInterface, LoggerMode, roms

    expert = load_expert("builtin", "Freeway")
    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setInt("random_seed", 1)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path("freeway"))
    noop, up = ale.getMinimalActionSet()[:2]
    assert "NOOP" in str(noop) and "UP" in str(up), (noop, up)
    rng = np.random.default_rng(0)
    hits, unexplained, pushed = 0, [], False
    while not ale.game_over():
        ram = ale.getRAM().copy()
        ale.act(up if rng.random() < 0.8 else noop)
        y, after = int(ram[expert.PLAYER_Y]), int(ale.getRAM()[expert.PLAYER_Y])
        now = 0 < y - after < 50  # pushed down, not wrapped to the bottom after a crossing
        if now and not pushed:
            hits += 1
            dx = expert.wrap(ram[expert.CARS : expert.CARS + 10].astype(float) - expert.CHICKEN_X)
            if not any(abs(dx[k]) <= expert.REACH for k in expert.lanes(y)):
                unexplained.append((y, list(expert.lanes(y)), dx.tolist()))
        pushed = now
    assert hits >= 20, hits
    assert not unexplained, unexplained
    assert [sorted(expert.lanes(expert.LANE0 + expert.LANE_H * k + 8)) for k in range(10)] == [[k] for k in range(10)]
    assert max(len(expert.lanes(y)) for y in range(256)) == 2


def test_expert2f_reuses_the_expert_baselines(tmp_path, monkeypatch):
    gen.generate_game(small_config(tmp_path, source="expert"), "Pong")
    first = GameDir(tmp_path, "expert", "Pong").meta()["baselines"]

    def fail(*a, **k):
        raise AssertionError("baselines measured again")

    monkeypatch.setattr(gen, "measure_baselines", fail)
    gen.generate_game(small_config(tmp_path, source="expert2f"), "Pong")
    assert GameDir(tmp_path, "expert2f", "Pong").meta()["baselines"] == first
    with pytest.raises(AssertionError, match="measured again"):  # another seed measures anew
        gen.generate_game(small_config(tmp_path, source="expert2f", seed=1, force=True), "Pong")


def test_workers_give_the_same_bytes(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    gen.generate(small_config(a, games=["Pong", "Freeway"], workers=1), progress=False)
    gen.generate(small_config(b, games=["Pong", "Freeway"], workers=2), progress=False)
    assert tree_bytes(a) == tree_bytes(b)
    assert validate(a, images=True).ok


def test_unknown_experts_are_clear_errors(tmp_path):
    with pytest.raises(AtariDataError, match="no built-in expert for Seaquest"):
        gen.generate_game(small_config(tmp_path), "Seaquest")
    # before any game is played: Pong was played and written, then Seaquest refused
    with pytest.raises(AtariDataError, match="--games: no built-in expert for Seaquest"):
        small_config(tmp_path / "two", games=["Pong", "Seaquest"])
    assert not (tmp_path / "two").exists()
    with pytest.raises(AtariDataError, match="--games: no built-in expert for Seaquest"):  # as load_expert reads it
        small_config(tmp_path / "two", games=["Pong", "Seaquest"], expert="builtin:x")
    with pytest.raises(AtariDataError, match="--games: no game given"):
        small_config(tmp_path, games=[])
    assert small_config(tmp_path, games=["Pong", "pong", "Pong"]).games == ["Pong"], "one game, once"
    with pytest.raises(AtariDataError, match="unknown expert 'magic'"):
        load_expert("magic", "Pong")
    with pytest.raises(AtariDataError, match="unknown source"):
        small_config(tmp_path, source="human")


def test_joystick_probs_rank_buttons_by_distance():
    actions = ("NOOP", "FIRE", "UP", "RIGHT", "LEFT", "DOWN", "UPRIGHT", "UPRIGHTFIRE")
    assert joystick("UPRIGHTFIRE") == (1, 1, 1) and joystick("DOWN") == (0, -1, 0)
    p = joystick_probs(actions, 1, 1, 0)
    assert actions[int(np.argmax(p))] == "UPRIGHT"
    assert p[actions.index("UPRIGHTFIRE")] > p[actions.index("NOOP")] > p[actions.index("LEFT")]
    assert p.sum() == pytest.approx(1)
    flat = joystick_probs(actions, None, None, None)
    assert np.allclose(flat, 1 / len(actions))


@pytest.mark.slow
def test_sigkill_then_rerun_gives_the_uninterrupted_bytes(tmp_path):
    args = [
        "generate",
        "--games",
        "Pong,Breakout",
        "--train-frames",
        "300",
        "--val-frames",
        "40",
        "--min-train-episodes",
        "2",
        "--decision-cap",
        "400",
        "--baseline-episodes",
        "1",
    ]
    cmd = [sys.executable, "-m", "atari_data.cli"]
    clean, killed = tmp_path / "clean", tmp_path / "killed"
    subprocess.run(cmd + args + ["--root", str(clean)], check=True, capture_output=True)
    for delay in (1.0, 4.0):  # once while playing, once later on (writing or the second game)
        p = subprocess.Popen(cmd + args + ["--root", str(killed)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert validate(killed).ok  # whatever is marked ready is whole
    subprocess.run(cmd + args + ["--root", str(killed)], check=True, capture_output=True)
    assert validate(killed, images=True).ok
    assert tree_bytes(killed) == tree_bytes(clean)


@pytest.mark.slow
def test_ray_executor_gives_the_local_bytes(tmp_path, ray_local):
    local, remote = tmp_path / "local", tmp_path / "ray"
    gen.generate(small_config(local, games=["Pong", "Breakout"]), progress=False)
    metas = gen.generate(small_config(remote, games=["Pong", "Breakout"], executor="ray"), progress=False)
    assert list(metas) == ["Pong", "Breakout"]
    assert tree_bytes(local) == tree_bytes(remote)


@pytest.mark.slow
def test_a_planners_episodes_fan_out_over_ray_with_the_local_bytes(tmp_path, ray_local):
    kw = dict(expert="planner", planner_frames=60, train_frames=16, val_frames=4, decision_cap=8, baseline_episodes=1)
    local, remote = tmp_path / "local", tmp_path / "ray"
    gen.generate(small_config(local, games=["Pong"], **kw), progress=False)
    gen.generate(small_config(remote, games=["Pong"], executor="ray", workers=2, **kw), progress=False)
    assert tree_bytes(local) == tree_bytes(remote)
