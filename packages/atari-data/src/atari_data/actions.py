"""Games and their action sets, read from ale-py (the one home of these facts).

A game is named by its ALE v5 name (``Breakout``, ``MsPacman``), exactly as in
``gym.make("ALE/<Game>-v5")``. Its options are the ALE minimal action set in v5 order; sources
that record the full 18-action set are mapped to it by action name.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterable
from functools import cache

import ale_py
from ale_py import roms

from atari_data.errors import AtariDataError

# ALE prints a banner on every emulator it creates unless told to log only errors.
ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)

#: The full 18-action set, index = ALE action id (``ale_py.Action``).
FULL_ACTIONS: tuple[str, ...] = tuple(a.name for a in sorted(ale_py.Action, key=lambda a: a.value))

# ROMs without a single-player mode; ALE registers no v5 env for them.
_NO_V5_ENV = {"combat", "joust", "maze_craze", "warlords"}


def _rom_to_name(rom: str) -> str:
    # Same rule as ale_py.registration.rom_id_to_name, which would pull in gymnasium on import.
    return rom.title().replace("_", "")


@cache
def _rom_ids() -> dict[str, str]:
    return {_rom_to_name(r): r for r in roms.get_all_rom_ids() if r not in _NO_V5_ENV}


def all_games() -> list[str]:
    """Every ALE v5 game name this ale-py ships, sorted."""
    return sorted(_rom_ids())


def resolve_game(name: str) -> str:
    """Return the canonical ALE v5 name, or raise with the closest matches."""
    games = _rom_ids()
    if name in games:
        return name
    folded = {g.lower(): g for g in games}
    key = name.replace("_", "").replace("-", "").replace(" ", "").lower()
    if key in folded:
        return folded[key]
    close = difflib.get_close_matches(name, list(games), n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see `atari-data games`"
    raise AtariDataError(f"unknown ALE v5 game {name!r}{hint}", field="game")


def rom_id(game: str) -> str:
    return _rom_ids()[resolve_game(game)]


@cache
def minimal_actions(game: str) -> tuple[str, ...]:
    """The game's minimal action set in ALE v5 order, as action names."""
    ale = ale_py.ALEInterface()
    ale.loadROM(roms.get_rom_path(rom_id(game)))
    return tuple(FULL_ACTIONS[a.value] for a in ale.getMinimalActionSet())


def full_to_minimal(game: str, full_ids: Iterable[int]) -> tuple[list[int | None], Counter]:
    """Map 18-action ids to indices into the game's minimal set, by name.

    Returns one index per input (``None`` where it has none) and the drop counts by reason:
    ``invalid_action`` (not an id of the full set) and ``not_in_minimal_set``.
    """
    index = {name: i for i, name in enumerate(minimal_actions(game))}
    out: list[int | None] = []
    dropped: Counter = Counter()
    for a in full_ids:
        if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < len(FULL_ACTIONS):
            dropped["invalid_action"] += 1
            out.append(None)
            continue
        i = index.get(FULL_ACTIONS[a])
        if i is None:
            dropped["not_in_minimal_set"] += 1
        out.append(i)
    return out, dropped
