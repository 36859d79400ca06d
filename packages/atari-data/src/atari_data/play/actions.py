"""Game names as atari-data's error type reports them, and mapping recorded 18-action ids to a game's
minimal set. The sets themselves live in :mod:`laya_protocol.games`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from atari_data.errors import AtariDataError
from laya_protocol import games
from laya_protocol.errors import UnknownName
from laya_protocol.games import FULL_ACTIONS, minimal_actions


def resolve_game(name: str, field: str = "game") -> str:
    """The canonical ALE v5 name, or a one-line error naming ``field`` (a flag, where a user typed
    the name) with the closest matches."""
    try:
        return games.resolve_game(name)
    except UnknownName as e:
        raise AtariDataError(f"{e}" + ("" if e.close else "; see `atari-data games`"), field=field) from None


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
