"""Aggregate statistics over per-episode normalised scores, in the shape of rliable.

Scores come as one array per game (its episodes' normalised scores; games may have different
episode counts). Point estimates pool every (episode, game) score the way rliable pools
(run, task) scores. Confidence intervals use a stratified bootstrap by default: episodes are
resampled with replacement *within each game* and the games are kept, so the interval reflects
episode-to-episode noise of this set of games. The task bootstrap also resamples the games.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

Scores = Sequence[np.ndarray]  # one 1-D array of episode scores per game


def iqm(scores: Scores) -> float:
    """Interquartile mean of all pooled scores: the mean of the middle 50% (25% trimmed each side)."""
    x = np.sort(np.concatenate([np.asarray(s, float) for s in scores]))
    cut = int(np.floor(0.25 * len(x)))  # as scipy.stats.trim_mean(x, 0.25)
    return float(x[cut : len(x) - cut].mean())


def mean(scores: Scores) -> float:
    return float(np.concatenate([np.asarray(s, float) for s in scores]).mean())


def median_of_means(scores: Scores) -> float:
    """Median over games of each game's mean score."""
    return float(np.median([np.mean(s) for s in scores]))


def optimality_gap(scores: Scores, gamma: float = 1.0) -> float:
    """How far below ``gamma`` (the expert) the pooled scores fall, on average; above counts as 0."""
    x = np.concatenate([np.asarray(s, float) for s in scores])
    return float(np.mean(np.maximum(gamma - x, 0.0)))


def performance_profile(scores: Scores, taus: np.ndarray) -> np.ndarray:
    """Fraction of pooled scores above each threshold tau."""
    x = np.concatenate([np.asarray(s, float) for s in scores])
    return (x[None, :] > np.asarray(taus, float)[:, None]).mean(1)


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """P(X > Y) averaged over games: per game, the chance a random episode of X beats one of Y
    (ties count half), i.e. the Mann-Whitney U statistic over m*n."""
    per_game = []
    for a, b in zip(x, y, strict=True):
        a, b = np.asarray(a, float), np.sort(np.asarray(b, float))
        # By ranks, not an m x n table (9.3 GiB at 100,000 episodes): Y below each a, and ties at half.
        below, up_to = np.searchsorted(b, a, "left"), np.searchsorted(b, a, "right")
        per_game.append(float((below.sum() + up_to.sum()) / (2 * len(a) * len(b))))
    return float(np.mean(per_game))


#: Bootstrap resamples and the interval's tail (95% intervals).
REPS, ALPHA = 2000, 0.05


def stratified_bootstrap_ci(
    stat: Callable[..., float], *groups: Scores, reps: int = REPS, alpha: float = ALPHA, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of ``stat(*groups)`` with episodes resampled within each game."""
    rng = np.random.default_rng(seed)
    arrays = [[np.asarray(s, float) for s in g] for g in groups]
    values = np.empty(reps)
    for r in range(reps):
        resampled = [[s[rng.integers(len(s), size=len(s))] for s in g] for g in arrays]
        values[r] = stat(*resampled)
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def mean_of_means(scores: Scores) -> float:
    """Mean over games of each game's mean score (every game weighs the same)."""
    return float(np.mean([np.mean(s) for s in scores]))


#: How intervals resample: ``episode`` within each game (stratified; the games are fixed), or
#: ``task``, which also resamples the games with replacement (rliable's task bootstrap), so the
#: interval includes which games were chosen.
BOOTSTRAPS = ("episode", "task")


def task_bootstrap_ci(
    stat: Callable[..., float], *groups: Scores, reps: int = REPS, alpha: float = ALPHA, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of ``stat(*groups)`` with games resampled with replacement (the same draw
    for every group, so paired comparisons stay paired), then episodes within each drawn game."""
    rng = np.random.default_rng(seed)
    arrays = [[np.asarray(s, float) for s in g] for g in groups]
    n = len(arrays[0])
    values = np.empty(reps)
    for r in range(reps):
        games = rng.integers(n, size=n)
        resampled = [[g[i][rng.integers(len(g[i]), size=len(g[i]))] for i in games] for g in arrays]
        values[r] = stat(*resampled)
    lo, hi = np.quantile(values, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def bootstrap_ci(stat: Callable[..., float], *groups: Scores, kind: str = "episode", seed: int = 0):
    """The interval of ``stat`` by the bootstrap ``kind`` (:data:`BOOTSTRAPS`)."""
    if kind == "task":
        return task_bootstrap_ci(stat, *groups, seed=seed)
    return stratified_bootstrap_ci(stat, *groups, seed=seed)
