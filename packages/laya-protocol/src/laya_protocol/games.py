"""ALE games and their action sets, read from ale-py itself.

A game is named by its ALE v5 name (``Breakout``, ``MsPacman``), exactly as in
``gym.make("ALE/<Game>-v5")``. Its ``minimal`` action set is ALE's minimal set in v5 order; the
``full`` set is the 18 actions of ``ale_py.Action`` in id order. Sets map to each other by name.
"""

from __future__ import annotations

import difflib
from functools import cache

import ale_py
from ale_py import roms

from laya_protocol.errors import UnknownName

# ALE prints a banner on every emulator it creates unless told to log only errors.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

#: The full 18-action set, index = ALE action id.
FULL_ACTIONS: tuple[str, ...] = tuple(a.name for a in sorted(ale_py.Action.__members__.values(), key=lambda a: a.value))
ACTION_SETS = ("minimal", "full")

# ROMs without a single-player mode; ALE registers no v5 env for them.
_NO_V5_ENV = {"combat", "joust", "maze_craze", "warlords"}


@cache
def _rom_ids() -> dict[str, str]:
    # The rule of ale_py.registration.rom_id_to_name, which would pull in gymnasium on import.
    return {r.title().replace("_", ""): r for r in roms.get_all_rom_ids() if r not in _NO_V5_ENV}


def all_games() -> list[str]:
    """Every ALE v5 game name this ale-py ships, sorted."""
    return sorted(_rom_ids())


def is_game(name: str) -> bool:
    """``name`` is an ALE v5 game's canonical name, as written."""
    return name in _rom_ids()


def resolve_game(name: str) -> str:
    """The canonical ALE v5 name (case, ``_``, ``-`` and spaces ignored), or :class:`UnknownName`."""
    games = _rom_ids()
    if name in games:
        return name
    folded = {g.lower(): g for g in games}
    key = name.replace("_", "").replace("-", "").replace(" ", "").lower()
    if key in folded:
        return folded[key]
    close = tuple(difflib.get_close_matches(name, list(games), n=3, cutoff=0.6))
    raise UnknownName(f"unknown ALE v5 game {name!r}", close)


def rom_id(game: str) -> str:
    return _rom_ids()[resolve_game(game)]


@cache
def minimal_actions(game: str) -> tuple[str, ...]:
    """The game's minimal action set in ALE v5 order, as action names."""
    ale = ale_py.ALEInterface()
    path = roms.get_rom_path(rom_id(game))
    assert path is not None  # every id of get_all_rom_ids has its ROM
    ale.loadROM(path)
    return tuple(FULL_ACTIONS[a.value] for a in ale.getMinimalActionSet())


def action_set(game: str, kind: str = "minimal") -> tuple[str, ...]:
    """The game's ``minimal`` or ``full`` action set, as action names."""
    if kind == "minimal":
        return minimal_actions(game)
    if kind == "full":
        resolve_game(game)
        return FULL_ACTIONS
    raise UnknownName(f"unknown action set {kind!r} (expected {' or '.join(ACTION_SETS)})")


@cache
def emulator(game: str) -> dict[str, str]:
    """What replaying or judging a game depends on besides the protocol: the ale-py version and
    the MD5 of the game's ROM, as recorded in meta.json and in evaluation results."""
    import hashlib

    path = roms.get_rom_path(rom_id(game))
    assert path is not None
    with open(path, "rb") as f:
        md5 = hashlib.md5(f.read()).hexdigest()
    return {"ale_py": ale_py.__version__, "rom_md5": md5}
