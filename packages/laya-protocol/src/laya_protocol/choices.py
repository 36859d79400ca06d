"""A policy's answer as a distribution over moves: the one rule for everything that draws from a
policy (the judge's sampled play, a DAgger round's), so a policy plays the same moves under both."""

from __future__ import annotations

import numpy as np


def distribution(p: np.ndarray) -> np.ndarray:
    """Non-negative scores with a positive entry (each row, along the last axis) as probabilities:
    scaled by their largest first, as 1e308s would sum past a float to inf and divide to zeros."""
    p = np.asarray(p, dtype=np.float64)
    p = p / p.max(-1, keepdims=True)
    return p / p.sum(-1, keepdims=True)
