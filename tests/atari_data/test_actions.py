import ale_py
import gymnasium as gym
import pytest

from atari_data.errors import AtariDataError
from atari_data.play.actions import full_to_minimal, resolve_game
from laya_protocol.games import FULL_ACTIONS, all_games, minimal_actions

gym.register_envs(ale_py)


@pytest.mark.parametrize("game", ["Pong", "Breakout", "MsPacman", "Freeway", "Boxing", "Frostbite"])
def test_minimal_actions_equal_the_v5_env(game):
    env = gym.make(f"ALE/{game}-v5")
    assert list(minimal_actions(game)) == env.unwrapped.get_action_meanings()
    env.close()


def test_full_actions_are_ale_action_enum():
    assert len(FULL_ACTIONS) == 18
    assert [FULL_ACTIONS[a.value] for a in ale_py.Action] == [a.name for a in ale_py.Action]


def test_full_to_minimal_maps_by_name_and_counts_drops():
    # Breakout: NOOP FIRE RIGHT LEFT. Full ids: 0 NOOP, 3 RIGHT, 4 LEFT, 2 UP (not minimal), 99 invalid.
    out, dropped = full_to_minimal("Breakout", [0, 3, 4, 2, 99, 1])
    assert out == [0, 2, 3, None, None, 1]
    assert dropped == {"not_in_minimal_set": 1, "invalid_action": 1}


def test_resolve_game_accepts_rom_style_names():
    assert resolve_game("ms_pacman") == "MsPacman"
    assert resolve_game("space invaders") == "SpaceInvaders"
    assert "MontezumaRevenge" in all_games()


def test_unknown_game_lists_close_matches():
    with pytest.raises(AtariDataError, match="did you mean .*Breakout"):
        resolve_game("Breakot")
