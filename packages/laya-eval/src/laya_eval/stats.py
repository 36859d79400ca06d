"""Aggregate statistics over per-episode normalised scores, in the shape of rliable.

Scores come as one array per game (its episodes' normalised scores). Point estimates pool every
(episode, game) score the way rliable pools (run, task) scores, so the pooled ones (IQM, optimality
gap, the profile) weigh a game by its episodes: rliable's runs x tasks matrix gives every game as
many, and so does every results file laya-eval reads (it checks). Games of other counts are taken,
and weighed that way. Confidence intervals use a stratified bootstrap by default: episodes are
resampled with replacement *within each game* and the games are kept, so the interval reflects
episode-to-episode noise of this set of games. The task bootstrap also resamples the games.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Scores = Sequence[np.ndarray]  # one 1-D array of episode scores per game

# Every statistic also takes a block of bootstrap resamples at once: each game's array then has a
# leading axis of resamples ([resamples, episodes]) and the answer is one value per resample. Scoring
# 2,000 resamples one call at a time cost 15 s per summary of 57 games, and a run summarises after
# every game.


def _pooled(scores: Scores) -> np.ndarray:
    """Every game's scores side by side on the last axis."""
    return np.concatenate([np.asarray(s, float) for s in scores], axis=-1)


def _game_means(scores: Scores) -> np.ndarray:
    return np.stack([np.asarray(s, float).mean(-1) for s in scores], axis=-1)


def _value(x) -> Any:
    """A float for one sample of scores, an array for a block of resamples (so the statistics return Any)."""
    return float(x) if np.ndim(x) == 0 else x


def iqm(scores: Scores) -> Any:
    """Interquartile mean of all pooled scores: the mean of the middle 50% (25% trimmed each side)."""
    x = np.sort(_pooled(scores), axis=-1)
    n = x.shape[-1]
    cut = int(np.floor(0.25 * n))  # as scipy.stats.trim_mean(x, 0.25)
    return _value(x[..., cut : n - cut].mean(-1))


def mean(scores: Scores) -> Any:
    return _value(_pooled(scores).mean(-1))


def median_of_means(scores: Scores) -> Any:
    """Median over games of each game's mean score."""
    return _value(np.median(_game_means(scores), axis=-1))


def mean_of_means(scores: Scores) -> Any:
    """Mean over games of each game's mean score (every game weighs the same)."""
    return _value(_game_means(scores).mean(-1))


def optimality_gap(scores: Scores, gamma: float = 1.0) -> Any:
    """How far below ``gamma`` (the expert) the pooled scores fall, on average; above counts as 0."""
    return _value(np.maximum(gamma - _pooled(scores), 0.0).mean(-1))


def performance_profile(scores: Scores, taus: np.ndarray) -> np.ndarray:
    """Fraction of pooled scores above each threshold tau (the taus on the last axis)."""
    pooled = _pooled(scores)
    return np.stack([(pooled > t).mean(-1) for t in np.asarray(taus, float)], axis=-1)


def probability_of_improvement(x: Scores, y: Scores) -> Any:
    """P(X > Y) averaged over games: per game, the chance a random episode of X beats one of Y
    (ties count half), i.e. the Mann-Whitney U statistic over m*n."""
    per_game = [_beats(np.asarray(a, float), np.asarray(b, float)) for a, b in zip(x, y, strict=True)]
    return _value(np.stack(per_game, axis=-1).mean(-1))  # games on the last axis: summed as in 1-D


#: A block of resamples is compared pair by pair where a game has at most this many pairs (about where
#: counting all pairs stops beating counting by ranks), in tables of at most ``PAIRS`` (2 MiB of booleans).
PAIRWISE, PAIRS = 1 << 13, 1 << 21


def _beats(a: np.ndarray, b: np.ndarray) -> Any:
    """One game's P(a > b), ties at half; a row per resample when ``a`` and ``b`` have a leading axis."""
    m, n = a.shape[-1], b.shape[-1]
    if a.ndim == 1:
        # By ranks, not an m x n table (9.3 GiB at 100,000 episodes): Y below each a, and ties at half.
        b = np.sort(b)
        below, up_to = np.searchsorted(b, a, "left"), np.searchsorted(b, a, "right")
        return float((below.sum() + up_to.sum()) / (2 * m * n))
    if m * n > PAIRWISE:  # by ranks, a resample at a time
        return np.array([_beats(ra, rb) for ra, rb in zip(a, b, strict=True)])
    rows = max(1, PAIRS // (m * n))
    out = np.empty(len(a))
    for i in range(0, len(a), rows):
        ra, rb = a[i : i + rows, :, None], b[i : i + rows, None, :]
        out[i : i + rows] = ((ra > rb).sum((1, 2)) + 0.5 * (ra == rb).sum((1, 2))) / (m * n)
    return out


#: Bootstrap resamples and the interval's tail (95% intervals).
REPS, ALPHA = 2000, 0.05
CONFIDENCE = f"{1 - ALPHA:.0%}"  # as reports and figures name the intervals: "95%"
#: Resampled scores held at once (8 MiB of float64): the resamples are drawn and scored in blocks
#: that big, whatever the number of episodes.
BLOCK = 1 << 20


def stratified_bootstrap_ci(stat: Callable[..., Any], *groups: Scores, **options) -> tuple[Any, Any]:
    """Percentile interval of ``stat(*groups)`` with episodes resampled within each game. ``stat`` is
    handed a block of resamples at once (each game an array [resamples, episodes]) and must return one
    value per resample, as every statistic of this module does (``options``: :func:`bootstrap_ci`'s)."""
    return bootstrap_ci(stat, *groups, kind="episode", **options)


def _episode_draws(arrays: list, rng: np.random.Generator) -> tuple[Callable[[int], list], int]:
    """(draw(k): the groups of k resamples, the most resamples a block holds) for the stratified bootstrap."""

    def draw(k: int) -> list:
        return [[s[rng.integers(len(s), size=(k, len(s)))] for s in g] for g in arrays]

    return draw, BLOCK // max(1, sum(len(s) for g in arrays for s in g))


def _scored(stat: Callable[..., Any], draw: Callable[[int], list], reps: int, block: int, curve: bool) -> np.ndarray:
    """``stat`` of ``reps`` resamples, ``draw(k)`` giving the groups of the next ``k`` (at most ``block``)."""
    block = max(1, block)
    sizes = [min(block, reps - i) for i in range(0, reps, block)]
    return np.concatenate([_per_resample(stat(*draw(k)), k, curve) for k in sizes])


def _per_resample(value, k: int, curve: bool) -> np.ndarray:
    """One value per resample, or with ``curve`` one row of values: anything else is a statistic's bug."""
    shape = np.shape(value)
    if shape[:1] != (k,) or len(shape) != 1 + curve:
        want = f"a row of points per resample ({k})" if curve else f"one value per resample ({k})"
        raise ValueError(f"a bootstrap statistic must return {want}, got shape {shape}")
    return np.asarray(value, float)


def _interval(values: np.ndarray, alpha: float) -> tuple[Any, Any]:
    """The percentile interval: two floats, or two arrays where the statistic is a curve (a value
    per resample and point, such as a performance profile's)."""
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2], axis=0)
    return _value(lo), _value(hi)


#: How intervals resample: ``episode`` within each game (stratified; the games are fixed), or
#: ``task``, which also resamples the games with replacement (rliable's task bootstrap), so the
#: interval includes which games were chosen.
BOOTSTRAPS = ("episode", "task")


def task_bootstrap_ci(stat: Callable[..., Any], *groups: Scores, **options) -> tuple[Any, Any]:
    """Percentile interval of ``stat(*groups)`` with games resampled with replacement (the same draw
    for every group, so paired comparisons stay paired), then episodes within each drawn game."""
    return bootstrap_ci(stat, *groups, kind="task", **options)


def _task_draws(arrays: list, rng: np.random.Generator) -> tuple[Callable[[int], list], int]:
    """(draw(k), the most resamples a block holds) for the task bootstrap."""
    n = len(arrays[0])
    if len({len(s) for g in arrays for s in g}) == 1:  # every game as many episodes: blocks of resamples
        tables = [np.stack(g) for g in arrays]  # [games, episodes] per group

        def draw(k: int) -> list:
            games = rng.integers(n, size=(k, n, 1))  # broadcasts against the episodes drawn: [k, n, episodes]
            return [
                list(np.moveaxis(t[games, rng.integers(t.shape[1], size=(k, n, t.shape[1]))], 1, 0)) for t in tables
            ]

        return draw, BLOCK // sum(t.size for t in tables)

    def one(k: int) -> list:  # the drawn games differ in episodes from one resample to the next: one at a time
        games = rng.integers(n, size=n)
        return [[g[i][rng.integers(len(g[i]), size=(1, len(g[i])))] for i in games] for g in arrays]

    return one, 1


def bootstrap_ci(
    stat: Callable[..., Any],
    *groups: Scores,
    kind: str = "episode",
    reps: int = REPS,
    alpha: float = ALPHA,
    seed: int = 0,
    curve: bool = False,
) -> tuple[Any, Any]:
    """The interval of ``stat`` by the bootstrap ``kind`` (:data:`BOOTSTRAPS`): two floats, or with
    ``curve`` two arrays, where ``stat`` gives a row of points per resample (a performance profile)."""
    rng = np.random.default_rng(seed)
    arrays = [[np.asarray(s, float) for s in g] for g in groups]
    draw, block = (_task_draws if kind == "task" else _episode_draws)(arrays, rng)
    return _interval(_scored(stat, draw, reps, block, curve), alpha)
