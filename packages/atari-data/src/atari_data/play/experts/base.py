"""The expert interface and how an `--expert` spec picks one."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.play.ale import AtariGame
from atari_data.play.experts.forms import ANY_GAME_EXPERTS, EXPERT_FORMS


class Expert(Protocol):
    """A policy over one game's minimal action set."""

    name: str

    def reset(self) -> None:
        """Forget per-episode state; called before each episode."""

    def probs(self, game: AtariGame) -> np.ndarray:
        """Action probabilities (float64, sums to 1) for the game's current state."""


def is_planner(spec: str) -> bool:
    return spec.partition(":")[0].partition("/")[0] == "planner"


def check_holds(spec: str) -> None:
    """Refuse a planner spec's bad hold before anything is played or written."""
    if is_planner(spec):
        from atari_data.play.experts.planner import planner_holds

        planner_holds(spec.partition(":")[0])


def playable_games(spec: str, games: list[str]) -> list[str]:
    """``games`` as ALE names, each once, refused on one line before anything is played when none is
    given or when the built-in experts (``spec`` builtin, or a planner on them) lack one: that was
    found after the games before it had been played and written."""
    from atari_data.play.actions import resolve_game

    names = list(dict.fromkeys(resolve_game(g, "--games") for g in games))
    if not names:
        raise AtariDataError("no game given", field="--games")
    kind, _, rest = spec.partition(":")
    if kind == "builtin" or (is_planner(spec) and rest.partition(":")[0] == "builtin"):  # as load_expert reads it
        from atari_data.play.experts.builtin import BUILTIN

        missing = [g for g in names if g not in BUILTIN]
        if missing:
            raise AtariDataError(
                f"no built-in expert for {', '.join(missing)} (built-in: {', '.join(sorted(BUILTIN))}; "
                f"any ALE game with --expert {ANY_GAME_EXPERTS})",
                field="--games",
            )
    return names


def expert_id(spec: str, planner_frames: int | None) -> str:
    """How data and baselines name an expert: its spec, and a planner's budget (``planner@3000``)."""
    if not is_planner(spec):
        return spec
    from atari_data.play.experts.planner import DEFAULT_FRAMES

    return f"{spec}@{DEFAULT_FRAMES if planner_frames is None else planner_frames}"


def load_expert(spec: str, game: str, planner_frames: int | None = None) -> Expert:
    """``builtin``, ``sb3:PATH``, ``cleanrl:PATH``, ``hub:REPO`` or ``planner[/K][:BASE]`` for ``game``;
    ``planner_frames`` is a planner's emulator frames per decision (default
    :data:`atari_data.play.experts.planner.DEFAULT_FRAMES`)."""
    kind, _, arg = spec.partition(":")
    if is_planner(spec):
        from atari_data.play.experts.planner import DEFAULT_FRAMES, Base, Planner, planner_holds

        holds = planner_holds(kind)
        base: Base | None = None
        if arg:  # the base that plays the rollouts
            if is_planner(arg):
                raise AtariDataError("a planner cannot be another planner's base", field="--expert")
            loaded = load_expert(arg, game)
            if not isinstance(loaded, Base):
                raise AtariDataError(f"{arg} cannot play a planner's rollouts (it cannot fork)", field="--expert")
            base = loaded
        name = f"{kind}:{base.name}" if base is not None else kind
        return Planner(game, base, DEFAULT_FRAMES if planner_frames is None else planner_frames, name, holds)
    if kind == "builtin":
        from atari_data.play.experts.builtin import builtin_expert

        return builtin_expert(game)
    if kind in ("sb3", "cleanrl", "hub"):
        if not arg:
            raise AtariDataError(f"{kind}: needs a path or repo, e.g. {kind}:PATH", field="--expert")
        from atari_data.play.experts.checkpoint import checkpoint_expert

        return checkpoint_expert(kind, arg, game)
    raise AtariDataError(
        f"unknown expert {spec!r} (expected {EXPERT_FORMS})",
        field="--expert",
    )
