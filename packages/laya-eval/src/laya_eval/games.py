"""Game names as laya-eval's error type reports them; the games and action sets live in
:mod:`laya_protocol.games`, shared with the data so both always agree."""

from __future__ import annotations

from laya_eval.errors import EvalError
from laya_protocol import games
from laya_protocol.errors import UnknownName


def resolve_game(name: str) -> str:
    try:
        return games.resolve_game(name)
    except UnknownName as e:
        raise EvalError(str(e), field="--games") from None
