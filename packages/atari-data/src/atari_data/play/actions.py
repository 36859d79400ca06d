"""Game names as atari-data's error type reports them, and mapping recorded 18-action ids to a game's
minimal set. The sets themselves live in :mod:`laya_protocol.games`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

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


def minimal_labels(game: str) -> dict[str, int]:
    """The game's minimal action names, each with its index (a record's label)."""
    return {name: i for i, name in enumerate(minimal_actions(game))}


def minimal_index(labels: Mapping[str, int], a: object) -> int | str:
    """18-action id ``a`` as an index into a minimal set (``labels``, from :func:`minimal_labels`), or
    the drop reason when it has none: ``invalid_action`` (not an id of the full set: None, a float,
    text, out of range) or ``not_in_minimal_set``."""
    if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a < len(FULL_ACTIONS):
        return "invalid_action"
    return labels.get(FULL_ACTIONS[a], "not_in_minimal_set")


def full_to_minimal(game: str, full_ids: Iterable[object]) -> tuple[list[int | None], Counter]:
    """Map 18-action ids to indices into the game's minimal set, by name.

    Returns one index per input (``None`` where it has none) and the drop counts by reason, as
    :func:`minimal_index` names them.
    """
    labels = minimal_labels(game)
    out: list[int | None] = []
    dropped: Counter = Counter()
    for a in full_ids:
        i = minimal_index(labels, a)
        if isinstance(i, str):
            dropped[i] += 1
        out.append(None if isinstance(i, str) else i)
    return out, dropped
