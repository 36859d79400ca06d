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
from laya_protocol.protocol import Protocol

from ..scripts import load_script
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
    [
        ("planner:planner", "cannot be another planner's base"),
        ("planner:magic", "unknown expert 'magic'"),
        ("planner/3:builtin", "longest hold must be 2, 4, 8 decisions"),
        ("planner/:builtin", "longest hold must be 2, 4, 8 decisions"),
        ("planner/16", "longest hold must be 2, 4, 8 decisions"),
        ("planner/08", "longest hold must be 2, 4, 8 decisions"),
        ("planner/\u00b2", "longest hold must be 2, 4, 8 decisions"),
        ("planner/3:magic", "longest hold"),  # the hold is checked before any base is loaded
    ],
)
def test_bad_planner_specs_are_refused(spec, message):
    with pytest.raises(AtariDataError, match=message):
        load_expert(spec, "Pong")


class _NoopWatcher:
    """A base written for the test (any forkable policy can be one): always NOOP. Each fork (one a
    rollout) records the chicken's height at every decision it is shown."""

    name = "noop"

    def __init__(self, forks: list[list[int]] | None = None):
        self.forks = forks if forks is not None else []
        self.heights: list[int] = []

    def reset(self) -> None:
        pass

    def probs(self, game) -> np.ndarray:
        self.heights.append(int(game.ram()[14]))
        return np.eye(len(game.actions))[0]

    def fork(self) -> "_NoopWatcher":
        twin = _NoopWatcher(self.forks)
        self.forks.append(twin.heights)
        return twin


def test_held_buttons_climb_further_keep_the_budget_and_the_base_watches_every_held_decision():
    """planner/8 holds a button 1, 2, 4 or 8 decisions (one of its 4 rollouts each) before the base
    plays on: UP held longer climbs higher; the emulator frames are those of no holds; and the base
    is shown every decision of a rollout, held or not, so a base that remembers (Freeway's car
    speeds) is not left behind."""
    planner = load_expert("planner/8:builtin", "Freeway", 3_000)
    assert planner.name == "planner/8:builtin" and planner.holds == (1, 2, 4, 8)
    assert expert_id("planner/8:builtin", 3_000) == "planner/8:builtin@3000"
    seen = {}
    for holds in ((1,), (1, 2, 4, 8)):
        game = AtariGame("Freeway")
        game.reset(seed=2)
        base = _NoopWatcher()
        planner = Planner("Freeway", base, budget=3_000, holds=holds)
        planner.values(game)
        rollouts, horizon = planner.split(game.protocol.frameskip)
        buttons, up = len(game.actions), game.actions.index("UP")
        # No life is lost on Freeway: every rollout plays its whole horizon.
        assert planner.frames_used == buttons * rollouts * horizon * game.protocol.frameskip
        assert len(base.forks) == buttons * rollouts
        assert all(len(h) == horizon - 1 for h in base.forks)  # every decision after the first press
        seen[holds] = [max(h) for h in base.forks[up * rollouts : (up + 1) * rollouts]]
    # The chicken starts at 6 and climbs 4 a decision. One press of UP, then NOOP: at most one more
    # decision's climb carried on by sticky repeats. Held 1, 2, 4, 8 decisions: higher each time.
    held = seen[(1, 2, 4, 8)]
    assert max(seen[(1,)]) <= 6 + 2 * 4, seen
    assert held == sorted(set(held)) and held[-1] >= 6 + 7 * 4, seen
    assert Planner("Freeway", holds=(1, 2, 4, 8)).hold_of(2) == [1, 2]  # fewer rollouts: the shortest holds
    with pytest.raises(ValueError, match="must start with 1"):
        Planner("Freeway", holds=())


def _freeway_without_sticky_moves() -> AtariGame:
    game = AtariGame("Freeway", Protocol.ale_v5("Freeway", repeat_action_probability=0.0))
    game.reset(seed=0)
    return game


def _first_crossing(moves: list[int], then: list[int]) -> int:
    """The decision of the first crossing after ``moves``, playing ``then`` and then the built-in expert."""
    game, expert = _freeway_without_sticky_moves(), load_expert("builtin", "Freeway")
    expert.reset()
    plan = moves + then
    for d in range(400):
        own = int(np.argmax(expert.probs(game)))
        reward, _ = game.act(plan[d] if d < len(plan) else own)
        if reward and d >= len(moves):
            return d
    raise AssertionError("no crossing in 400 decisions")


def test_holding_a_button_finds_a_two_decision_plan_that_one_step_improvement_cannot():
    """Freeway without sticky moves, decision 128 of the built-in expert's own game: the expert
    waits for a car, and pressing UP once and then following it changes nothing, so the one-step
    planner waits too. Holding UP for 2 decisions slips in ahead of the car and crosses a decision
    earlier (decision index 159 against 160, from 0): planner/8 finds that and presses UP."""
    game, expert = _freeway_without_sticky_moves(), load_expert("builtin", "Freeway")
    one, held = load_expert("planner:builtin", "Freeway", 3_000), load_expert("planner/8:builtin", "Freeway", 3_000)
    for p in (expert, one, held):
        p.reset()
    moves = []
    for _ in range(128):
        for p in (one.base, held.base):
            p.probs(game)  # the planners' own bases follow the game, as they do when planning every decision
        moves.append(int(np.argmax(expert.probs(game))))
        game.act(moves[-1])
    noop, up = game.actions.index("NOOP"), game.actions.index("UP")
    assert int(np.argmax(expert.probs(game))) == noop
    assert int(np.argmax(one.values(game))) == noop
    assert int(np.argmax(held.values(game))) == up
    base_crosses = _first_crossing(moves, [])
    assert _first_crossing(moves, [up]) == base_crosses  # what one step of improvement sees
    assert _first_crossing(moves, [up, up]) < base_crosses, base_crosses


def test_the_exhaustive_search_bounds_what_the_builtin_expert_scores_without_sticky_moves():
    """tools/exact_optimum.py: over Freeway's first 60 decisions (sticky actions off) the built-in
    expert, played on the same deterministic game, scores no more than the search's best, and the
    best is one crossing, which no path makes in fewer than 42 decisions."""
    best, first, peak = load_script("tools/exact_optimum.py").best_score("Freeway", 60)
    game = AtariGame("Freeway", Protocol.ale_v5("Freeway", repeat_action_probability=0.0))
    game.reset(seed=0)
    expert = load_expert("builtin", "Freeway")
    expert.reset()
    for _ in range(60):
        game.act(int(np.argmax(expert.probs(game))))
    assert 1 <= game.score <= best <= 60 // 42, (game.score, best)
    assert sorted(first) == list(range(1, int(best) + 1)) and min(first.values()) >= 42, first
    assert peak > 1


def test_a_bad_hold_is_refused_before_anything_is_played(tmp_path):
    with pytest.raises(AtariDataError, match="longest hold"):
        small_config(tmp_path, games=["Pong"], expert="planner/3")
    with pytest.raises(AtariDataError, match="longest hold"):
        DaggerConfig(root=str(tmp_path), round=1, games=["Pong"], expert="planner/5:builtin")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("frames", ["0", "1000000000000"])
def test_a_zero_or_huge_budget_is_one_line_and_exit_2(tmp_path, frames):
    """10^12 frames sized a rollout array of 310 GiB: a MemoryError traceback (an outside review)."""
    out = subprocess.run(
        [sys.executable, "-m", "atari_data.cli", "generate", "--root", str(tmp_path), "--games", "Pong"]
        + ["--expert", "planner", "--planner-frames", frames],
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
