"""Names that every package spells the same: splits and baseline keys.

A dataset's meta.json holds its baselines as ``<role>_score`` (mean over episodes, up to the
data's decision cap) and ``<role>_scores`` (per episode), and the same again after the first
:data:`~laya_protocol.protocol.BASELINE_CAP` decisions with a ``_cap<N>`` suffix, for each role
in :data:`BASELINE_ROLES`.
"""

from __future__ import annotations

#: Splits of the on-disk layout, in the order they are written.
SPLITS = ("train", "val")
#: The split names the Hub and ``datasets`` use for them.
HUB_SPLITS = {"train": "train", "val": "validation"}

BASELINE_ROLES = ("expert", "random")


def score_key(role: str, cap: int | None = None) -> str:
    """``expert_score``, or ``expert_score_cap4500`` for the score after ``cap`` decisions."""
    return f"{role}_score" + (f"_cap{cap}" if cap else "")


def scores_key(role: str, cap: int | None = None) -> str:
    """The per-episode list beside :func:`score_key`."""
    return f"{role}_scores" + (f"_cap{cap}" if cap else "")
