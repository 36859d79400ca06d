"""The expert interface and how an `--expert` spec picks one."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.play.ale import AtariGame


class Expert(Protocol):
    """A policy over one game's minimal action set."""

    name: str

    def reset(self) -> None:
        """Forget per-episode state; called before each episode."""

    def probs(self, game: AtariGame) -> np.ndarray:
        """Action probabilities (float64, sums to 1) for the game's current state."""


def load_expert(spec: str, game: str) -> Expert:
    """``builtin``, ``sb3:PATH``, ``cleanrl:PATH`` or ``hub:REPO`` for ``game``."""
    kind, _, arg = spec.partition(":")
    if kind == "builtin":
        from atari_data.play.experts.builtin import builtin_expert

        return builtin_expert(game)
    if kind in ("sb3", "cleanrl", "hub"):
        if not arg:
            raise AtariDataError(f"{kind}: needs a path or repo, e.g. {kind}:PATH", field="--expert")
        from atari_data.play.experts.checkpoint import checkpoint_expert

        return checkpoint_expert(kind, arg, game)
    raise AtariDataError(
        f"unknown expert {spec!r} (expected builtin, sb3:PATH, cleanrl:PATH or hub:REPO)", field="--expert"
    )
