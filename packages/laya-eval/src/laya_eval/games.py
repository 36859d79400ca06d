"""ALE games and their minimal action sets, read from ale-py.

laya-eval depends on no other package of this workspace, so it reads these facts from ale-py
itself; a test holds them equal to atari-data's.
"""

from __future__ import annotations

import difflib
from functools import cache

import ale_py
from ale_py import roms

from laya_eval.errors import EvalError

ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)
FULL_ACTIONS: tuple[str, ...] = tuple(a.name for a in sorted(ale_py.Action, key=lambda a: a.value))
_NO_V5_ENV = {"combat", "joust", "maze_craze", "warlords"}


@cache
def _roms() -> dict[str, str]:
    return {r.title().replace("_", ""): r for r in roms.get_all_rom_ids() if r not in _NO_V5_ENV}


def resolve_game(name: str) -> str:
    games = _roms()
    if name in games:
        return name
    folded = {g.lower(): g for g in games}
    key = name.replace("_", "").replace("-", "").replace(" ", "").lower()
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(name, list(games), n=3, cutoff=0.6)
    raise EvalError(f"unknown ALE v5 game {name!r}" + (f"; did you mean {', '.join(close)}?" if close else ""),
                    field="--games")


def rom_id(game: str) -> str:
    return _roms()[resolve_game(game)]


@cache
def minimal_actions(game: str) -> tuple[str, ...]:
    ale = ale_py.ALEInterface()
    ale.loadROM(roms.get_rom_path(rom_id(game)))
    return tuple(FULL_ACTIONS[a.value] for a in ale.getMinimalActionSet())
