"""Seeded resets without the ROM reload play exactly the episodes a reload plays."""

import hashlib

import numpy as np
import pytest

from atari_data.play.ale import AtariGame, episode_seed


def episodes(game: AtariGame, moves: np.ndarray, count: int) -> list[tuple]:
    """Each episode's screens (hashed), score, lives and end, under the same random moves: moves
    that are not NOOP end each episode, so a sticky move carried into the next would show."""
    out = []
    for e in range(count):
        fired = game.reset(episode_seed(7, game.game, e))
        seen = hashlib.sha256(game.screen().tobytes())
        for a in moves[e]:
            if game.done:
                break
            _, f = game.act(int(a))
            fired |= f
            seen.update(game.screen().tobytes())
        out.append((seen.hexdigest(), game.score, game.ale.lives(), game.done, fired))
    return out


@pytest.mark.parametrize("game", ["Pong", "Breakout", "Freeway", "Boxing"])
def test_a_seeded_reset_without_the_reload_plays_what_a_reload_plays(game):
    quick, reloaded = AtariGame(game), AtariGame(game, reload_rom=True)
    moves = np.random.default_rng(0).integers(1, len(quick.actions), size=(5, 120))
    assert episodes(quick, moves, 5) == episodes(reloaded, moves, 5)
    assert quick.reseeder.trusted is True, "checked at the second reset, used from the third"
    assert reloaded.reseeder.trusted is False


def test_a_shortcut_that_disagrees_with_the_reload_is_never_used():
    """The check at the second reset compares state and screen; a kept state that is off by one
    byte of RAM fails it, and every later reset reloads."""
    quick, reloaded = AtariGame("Breakout"), AtariGame("Breakout", reload_rom=True)
    quick.reset(episode_seed(7, "Breakout", 0))
    before = bytearray(quick.reseeder._before)
    before[len(before) // 2] ^= 1
    quick.reseeder._before = bytes(before)
    moves = np.random.default_rng(1).integers(1, len(quick.actions), size=(3, 80))
    assert episodes(quick, moves, 3) == episodes(reloaded, moves, 3)
    assert quick.reseeder.trusted is False
