import numpy as np
import pytest
from scipy import stats as sps

from laya_eval.stats import (
    iqm,
    mean,
    median_of_means,
    optimality_gap,
    performance_profile,
    probability_of_improvement,
    stratified_bootstrap_ci,
)

RNG = np.random.default_rng(0)


def test_iqm_matches_scipy_trim_mean():
    for n in (4, 7, 10, 33):
        games = [RNG.normal(size=n) for _ in range(5)]
        assert iqm(games) == pytest.approx(sps.trim_mean(np.concatenate(games), 0.25))


def test_iqm_by_hand():
    # 8 pooled scores 1..8: drop 1, 2 and 7, 8; mean of 3..6 is 4.5
    assert iqm([np.array([1, 5, 8, 3]), np.array([2, 7, 4, 6])]) == 4.5


def test_mean_median_and_gap_by_hand():
    games = [np.array([0.0, 1.0]), np.array([2.0, 2.0]), np.array([-1.0, 0.0])]
    assert mean(games) == pytest.approx(4 / 6)
    assert median_of_means(games) == 0.5
    # gaps to 1: 1, 0, 0, 0, 2, 1 -> mean 4/6
    assert optimality_gap(games) == pytest.approx(4 / 6)


def test_performance_profile():
    games = [np.array([0.0, 0.5]), np.array([1.0, 1.5])]
    assert performance_profile(games, np.array([-1, 0, 0.75, 2])).tolist() == [1.0, 0.75, 0.5, 0.0]


def test_probability_of_improvement_is_mann_whitney():
    x = [RNG.normal(0.3, 1, 12), RNG.integers(0, 3, 9).astype(float)]
    y = [RNG.normal(0.0, 1, 10), RNG.integers(0, 3, 8).astype(float)]
    expected = np.mean([sps.mannwhitneyu(a, b).statistic / (len(a) * len(b)) for a, b in zip(x, y, strict=True)])
    assert probability_of_improvement(x, y) == pytest.approx(expected)
    assert probability_of_improvement([np.array([1.0])], [np.array([1.0])]) == 0.5


def test_stratified_bootstrap_resamples_episodes_within_games_only():
    constant = [np.full(5, 0.2), np.full(5, 0.8)]
    lo, hi = stratified_bootstrap_ci(iqm, constant)
    assert lo == hi == pytest.approx(iqm(constant)), "no episode noise, no interval: games are never resampled"
    noisy = [RNG.normal(0.5, 0.3, 20) for _ in range(6)]
    lo, hi = stratified_bootstrap_ci(iqm, noisy, seed=1)
    assert lo < iqm(noisy) < hi
    assert stratified_bootstrap_ci(iqm, noisy, seed=1) == (lo, hi)
    wide = stratified_bootstrap_ci(iqm, [g[:5] for g in noisy], seed=1)
    assert wide[1] - wide[0] > hi - lo, "fewer episodes, wider interval"
