"""The shared facts: one definition each, and every package reads that one."""

from dataclasses import fields

import pytest

from atari_data import schema
from atari_data.errors import AtariDataError
from laya_eval.errors import EvalError
from laya_protocol import doom, games, names, seeds
from laya_protocol.errors import UnknownName
from laya_protocol.protocol import BASELINE_CAP, DATA_DECISION_CAP, EVAL_DECISION_CAP, FRAME_CAP, Protocol


def test_the_protocol_record_and_its_schema_have_the_same_fields():
    declared = [f.name for f in schema.PROTOCOL.fields]
    assert declared == [f.name for f in fields(Protocol)]
    assert schema.check_structure(Protocol.ale_v5("Pong").to_dict(), schema.PROTOCOL) == []


def test_named_caps():
    assert DATA_DECISION_CAP * Protocol.ale_v5("Pong").frameskip == FRAME_CAP
    assert Protocol.ale_v5("Pong").decision_cap == EVAL_DECISION_CAP == BASELINE_CAP


def test_action_sets():
    assert games.action_set("Pong") == ("NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE")
    assert games.action_set("Pong", "full") == games.FULL_ACTIONS and len(games.FULL_ACTIONS) == 18
    for game in ("Breakout", "MsPacman", "Seaquest"):
        assert set(games.minimal_actions(game)) <= set(games.FULL_ACTIONS)
    with pytest.raises(UnknownName, match="action set"):
        games.action_set("Pong", "some")


def test_each_package_reports_an_unknown_game_in_its_own_words():
    from atari_data.play.actions import resolve_game as data_resolve
    from laya_eval.games import resolve_game as eval_resolve

    assert data_resolve("ms_pacman") == eval_resolve("MS-PACMAN") == games.resolve_game("mspacman") == "MsPacman"
    with pytest.raises(UnknownName) as e:
        games.resolve_game("Pongg")
    assert "Pong" in e.value.close
    with pytest.raises(AtariDataError, match="did you mean Pong"):
        data_resolve("Pongg")
    with pytest.raises(EvalError, match="did you mean Pong"):
        eval_resolve("Pongg")


def test_seed_ranges_are_apart_and_all_listed():
    starts = [first for _, first, _ in seeds.RANGES]
    assert starts == sorted(set(starts)), "roles start in order, none shares a start"
    limits = {"DAGGER_ROUND_STRIDE", "MAX_DAGGER_ROUND", "MAX_SEED", "MAX_EPISODES"}  # not where a range starts
    constants = {v for k, v in vars(seeds).items() if k.isupper() and isinstance(v, int) and k not in limits}
    assert constants == set(starts), "every range constant is in the table that help texts print"
    assert seeds.seed_problem(max(starts), seeds.MAX_EPISODES) is None, "every range is a valid ALE seed"
    # Twenty DAgger rounds stay below the imported rows' numbers, and no round reaches the next's:
    # its train episodes are numbered from TRAIN_EPISODES_FROM, so the 8,001st would take the next
    # round's first seed (the check was of episode 9,999 alone, and nothing stopped a round there).
    assert seeds.dagger_episode(19, seeds.DAGGER_ROUND_STRIDE - 1) < seeds.IMPORTED_VAL_FROM
    last = seeds.dagger_episode(1, seeds.TRAIN_EPISODES_FROM + 7_999)
    assert last < seeds.dagger_episode(2, seeds.VAL_EPISODES_FROM)
    with pytest.raises(ValueError, match="would take a seed of round 2"):
        seeds.dagger_episode(1, seeds.TRAIN_EPISODES_FROM + 8_000)
    # ... and no round past the last that fits: round 20 numbered its episodes as the imported rows'
    # (an outside review); every round's seeds stay below them
    assert seeds.MAX_DAGGER_ROUND == 19
    for round_ in (0, seeds.MAX_DAGGER_ROUND + 1):
        with pytest.raises(ValueError, match=f"DAgger round {round_}: expected 1 to 19"):
            seeds.dagger_episode(round_, 0)
    for _, first, _ in seeds.RANGES:
        assert f"{first:,}" in seeds.table()


def test_baseline_key_names():
    assert names.score_key("expert") == "expert_score"
    assert names.scores_key("random", BASELINE_CAP) == f"random_scores_cap{BASELINE_CAP}"
    declared = {f.name for f in schema.BASELINES.fields}
    for role in names.BASELINE_ROLES:
        for cap in (None, BASELINE_CAP):
            assert {names.score_key(role, cap), names.scores_key(role, cap)} <= declared


def test_splits():
    assert tuple(names.HUB_SPLITS) == names.SPLITS
    assert names.HUB_SPLITS["val"] == "validation"


def test_the_doom_expert_is_one_for_data_and_judge():
    pytest.importorskip("vizdoom", reason="ViZDoom is an optional extra ([vizdoom])")
    import numpy as np

    from atari_data.play import doom as data_doom
    from laya_eval.batch import Batch
    from laya_eval.doom import ExpertPolicy

    game = doom.make_game("basic", seed=7)
    try:
        names_ = doom.buttons(game)
        judge = ExpertPolicy(game)
        rng = np.random.default_rng(0)
        seen = {"labelled": 0, "none": 0}
        for screen, expert, _played in data_doom.play(game, 7, data_doom.epsilon_expert(0.5, len(names_)), rng):
            frame = np.ascontiguousarray(screen)
            batch = Batch(
                game="DoomBasic",
                actions=names_,
                frames=frame[None],
                prev_frames=frame[None],
                new_episode=np.array([False]),
                episodes=np.array([0]),
                platform="vizdoom",
            )
            ours = doom.expert_button(game.get_state(), names_, game.get_screen_width())
            assert expert == ours, "the data's label is the protocol's expert"
            assert int(judge(batch)[0]) == (names_.index("ATTACK") if ours is None else ours)
            seen["none" if ours is None else "labelled"] += 1
        assert seen["labelled"] > 0
    finally:
        game.close()
