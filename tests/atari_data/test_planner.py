"""The planning expert: real ALE rollouts, the real game left untouched, the same bytes every run."""

import json
import subprocess
import sys

import numpy as np
import pytest

from atari_data.errors import AtariDataError
from atari_data.layout import GameDir
from atari_data.play.ale import AtariGame, episode_seed, play_episode
from atari_data.play.experts import expert_id, load_expert
from atari_data.play.experts.planner import LIFE_PENALTY, NOVELTY_WEIGHT, Planner, on_evidence
from atari_data.produce.dagger import DaggerConfig, write_dagger_round
from atari_data.produce.generate import generate_game

from .conftest import small_config, tree_bytes

BUDGET = 300  # frames per decision: small, so a test plays in seconds


def _screens(game: AtariGame, moves: list[int], planner: Planner | None) -> list[bytes]:
    screens = []
    fired = game.reset(seed=5)
    assert fired is not None
    for m in moves:
        if planner is not None:
            planner.probs(game)
        game.act(m)
        screens.append(game.screen().tobytes())
    return screens


def test_planning_leaves_the_real_game_and_its_sticky_action_stream_alone():
    """Rollouts run in the planner's own emulator: the real episode, sticky repeats included,
    is the same frame for frame whether or not a planner looked ahead at every decision."""
    moves = [int(m) for m in np.random.default_rng(0).integers(4, size=40)]
    plain = _screens(AtariGame("Breakout"), moves, None)
    planned = _screens(AtariGame("Breakout"), moves, Planner("Breakout", budget=BUDGET))
    assert planned == plain


def test_targets_are_a_distribution_whose_argmax_is_the_best_value_and_repeat_exactly():
    game = AtariGame("Pong")
    a, b = Planner("Pong", budget=BUDGET), Planner("Pong", budget=BUDGET)
    game.reset(seed=3)
    for _ in range(12):
        game.act(2)
    values = a.values(game)
    p = a.probs(game)
    assert p.shape == (6,) and abs(p.sum() - 1) < 1e-9 and (p >= 0).all()
    assert np.argmax(p) == np.argmax(values)
    np.testing.assert_array_equal(b.probs(game), p)  # seeded by (episode seed, decision), not by history


def _played_by_builtin(name: str, decisions: int) -> AtariGame:
    """A game from reset (ALE seed 3) after its built-in expert's first ``decisions`` moves."""
    game = AtariGame(name)
    game.reset(seed=3)
    base = load_expert("builtin", name)
    base.reset()
    for _ in range(decisions):
        game.act(int(np.argmax(base.probs(game))))
    return game


def test_over_a_base_buttons_with_the_same_effect_meet_the_same_dice():
    """Common random numbers: over a base, rollout r of every button meets the same sticky repeats,
    so two buttons that do the same thing (Breakout's FIRE is NOOP in a rally) get the same returns
    rollout by rollout, and a difference between buttons is the button's, not the dice's."""
    game = _played_by_builtin("Breakout", 80)
    returns, *_ = load_expert("planner:builtin", "Breakout", 3_000).rollouts(game)
    noop, fire, right = (returns[game.actions.index(a)].tolist() for a in ("NOOP", "FIRE", "RIGHT"))
    assert len(set(noop)) > 1, noop  # the dice matter here: rollouts of one button differ
    assert fire == noop and right != noop, (noop, fire, right)


def test_over_a_base_a_button_wins_on_evidence_not_on_a_few_lucky_rollouts():
    own = [1.0, 1.0, 1.0, 1.0]
    lucky = [4.0, -1.0, 4.0, -1.0]  # a higher mean (1.5), from two of four rollouts
    steady = [1.2, 1.2, 1.2, 1.2]  # a little better in every rollout
    values = on_evidence(np.array([own, lucky]), own=0)
    assert values[1] < values[0], values  # plain means would have left the base for luck
    values = on_evidence(np.array([own, lucky, steady]), own=0)
    assert np.argmax(values) == 2 and values[2] == pytest.approx(1.2), values
    np.testing.assert_array_equal(on_evidence(np.array([[1.0], [2.0]]), own=0), [1.0, 2.0])  # one rollout: means
    # Paired: the base's own rollouts vary with the dice; a button 0.5 better under every die is better
    # on evidence, though unpaired spreads (0 to 5.5) would have buried it.
    own, better = [0.0, 5.0, 0.0, 5.0], [0.5, 5.5, 0.5, 5.5]
    values = on_evidence(np.array([own, better]), own=0)
    assert values[0] == pytest.approx(2.5) and values[1] == pytest.approx(3.0), values


def test_over_a_base_the_planner_keeps_the_bases_button_where_plain_means_would_leave_it():
    """The evidence rule in the real form: a Pong state (the built-in expert's own game, decision
    112) where the rollouts' plain means favour another button, but not rollout by rollout."""
    game = _played_by_builtin("Pong", 112)
    returns, lost, _, biggest, prior = load_expert("planner:builtin", "Pong", 1_200).rollouts(game)
    own, means = int(np.argmax(prior)), (returns - LIFE_PENALTY * biggest * lost).mean(1)
    assert int(np.argmax(means + NOVELTY_WEIGHT * prior)) != own  # plain means would leave the base here
    assert int(np.argmax(load_expert("planner:builtin", "Pong", 1_200).values(game))) == own


def test_the_planner_outplays_random_on_the_same_boxing_episodes():
    def play(episode: int, choose_for) -> float:
        game = AtariGame("Boxing")
        choose = choose_for(game)
        for _ in play_episode(game, episode_seed(0, "Boxing", episode), choose, 60):
            pass
        return game.score

    rng = np.random.default_rng(0)
    planner = Planner("Boxing", budget=400)
    random_score = sum(play(e, lambda g: lambda _d: int(rng.integers(len(g.actions)))) for e in (0, 1))
    planner_score = sum(play(e, lambda g: lambda _d: int(np.argmax(planner.probs(g)))) for e in (0, 1))
    assert planner_score >= random_score + 10, (planner_score, random_score)


def test_a_builtin_base_is_forked_per_rollout_and_keeps_following_the_real_episode():
    base = load_expert("builtin", "Pong")
    planner = load_expert("planner:builtin", "Pong", BUDGET)
    assert planner.name == "planner:builtin" and planner.base is not None
    game = AtariGame("Pong")
    game.reset(seed=1)
    planner.reset()
    for _ in range(5):
        planner.probs(game)
        game.act(0)
    twin = planner.base.fork()
    twin.state["ball"] = (-1, -1)
    assert planner.base.state["ball"] != (-1, -1), "a rollout's fork must not write into the real base"
    assert base.state == {}


@pytest.mark.parametrize(
    "spec, message",
    [("planner:planner", "cannot be another planner's base"), ("planner:magic", "unknown expert 'magic'")],
)
def test_bad_planner_specs_are_refused(spec, message):
    with pytest.raises(AtariDataError, match=message):
        load_expert(spec, "Pong")


def test_a_zero_budget_is_one_line_and_exit_2(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "atari_data.cli", "generate", "--root", str(tmp_path), "--games", "Pong"]
        + ["--expert", "planner", "--planner-frames", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "--planner-frames" in out.stderr


def test_generate_with_a_planner_gives_the_same_bytes_on_one_process_and_on_two(tmp_path):
    """Two workers play episodes ahead; the writer replays their moves for the frames."""
    kw = dict(
        expert="planner",
        planner_frames=100,
        train_frames=30,
        val_frames=8,
        min_train_episodes=2,
        decision_cap=15,
        baseline_episodes=2,
    )
    one, two = tmp_path / "one", tmp_path / "two"
    generate_game(small_config(one, **kw), "Breakout")
    generate_game(small_config(two, workers=2, **kw), "Breakout")
    assert tree_bytes(one) == tree_bytes(two)
    meta = GameDir(one, "expert2f", "Breakout").meta()
    assert meta["baselines"]["expert"] == expert_id("planner", 100) == "planner@100"
    assert "expert planner@100" in meta["origin"]


def test_dagger_labels_the_states_the_learner_reached_with_the_planner(tmp_path):
    def learner(frames, game, actions):  # always presses the first button
        return np.eye(len(actions))[0]

    cfg = DaggerConfig(
        root=str(tmp_path),
        round=1,
        games=["Breakout"],
        expert="planner",
        planner_frames=100,
        train_frames=12,
        val_frames=4,
        min_train_episodes=1,
        decision_cap=12,
        greedy=True,
    )
    write_dagger_round(cfg, learner)
    g = GameDir(tmp_path, "dagger1", "Breakout")
    records = list(g.records("train"))
    assert records and all(r["provenance"]["played"] == 0 for r in records)
    assert any(r["label"] != 0 for r in records), "the planner labels, not the learner"
    assert "expert planner@100" in json.loads((g.path / "meta.json").read_text())["origin"]
