import numpy as np
import pytest
from scipy import stats as sps

from laya_eval.stats import (
    BOOTSTRAPS,
    bootstrap_ci,
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


def test_every_aggregate_matches_rliables_definitions_to_1e12():
    """rliable's metrics (google-research/rliable, rliable/metrics.py) on a runs x tasks matrix:
    mean and median of per-task means, optimality gap gamma - mean(min(x, gamma)), IQM as scipy's
    25%-trimmed mean of every score, probability of improvement as Mann-Whitney U / (n_x n_y) per
    task (0.5 for identical columns), averaged. Written here from those definitions."""
    from scipy.stats import mannwhitneyu, trim_mean

    from laya_eval.stats import mean_of_means

    rng = np.random.default_rng(7)
    for runs, tasks in ((5, 3), (10, 8), (3, 26)):
        x = rng.normal(0.5, 0.6, size=(runs, tasks))
        y = rng.normal(0.4, 0.6, size=(runs + 2, tasks))
        y[:2, 0] = x[:2, 0]  # ties across X and Y count half
        per_game_x, per_game_y = list(x.T), list(y.T)
        assert abs(mean_of_means(per_game_x) - np.mean(np.mean(x, axis=0))) < 1e-12
        assert abs(median_of_means(per_game_x) - np.median(np.mean(x, axis=0))) < 1e-12
        assert abs(optimality_gap(per_game_x) - (1 - np.mean(np.minimum(x, 1)))) < 1e-12
        assert abs(iqm(per_game_x) - trim_mean(x, proportiontocut=0.25, axis=None)) < 1e-12
        reference = np.mean(
            [mannwhitneyu(x[:, t], y[:, t], alternative="greater")[0] / (runs * (runs + 2)) for t in range(tasks)]
        )
        assert abs(probability_of_improvement(per_game_x, per_game_y) - reference) < 1e-12
    same = rng.normal(size=(4, 2))
    assert probability_of_improvement(list(same.T), list(same.T)) == 0.5


def test_every_aggregate_equals_rliables_own_to_1e12():
    """The same, against rliable itself (the bench group installs it): its metrics module's
    functions on the runs x tasks matrix, ours on the per-game columns."""
    metrics = pytest.importorskip("rliable.metrics", reason="rliable is in the bench dependency group")
    from laya_eval.stats import mean_of_means

    rng = np.random.default_rng(11)
    for runs, tasks in ((5, 3), (10, 26), (4, 57)):
        x = rng.normal(0.5, 0.6, size=(runs, tasks))
        y = rng.normal(0.4, 0.6, size=(runs + 1, tasks))
        y[:3, 1] = x[:3, 1]
        gx, gy = list(x.T), list(y.T)
        for ours, theirs in (
            (mean_of_means(gx), metrics.aggregate_mean(x)),
            (median_of_means(gx), metrics.aggregate_median(x)),
            (optimality_gap(gx), metrics.aggregate_optimality_gap(x)),
            (iqm(gx), metrics.aggregate_iqm(x)),
            (probability_of_improvement(gx, gy), metrics.probability_of_improvement(x, y)),
        ):
            assert abs(ours - float(theirs)) < 1e-12, (ours, theirs)


def test_the_task_bootstrap_resamples_games_as_well():
    from laya_eval.stats import mean_of_means, task_bootstrap_ci

    games = [np.full(6, 0.0), np.full(6, 1.0)]  # no episode noise at all: only the choice of games varies
    assert stratified_bootstrap_ci(mean_of_means, games) == (0.5, 0.5)
    lo, hi = task_bootstrap_ci(mean_of_means, games)
    assert lo == 0.0 and hi == 1.0, "drawing the same game twice gives 0 or 1"
    assert task_bootstrap_ci(mean_of_means, games, seed=3) == task_bootstrap_ci(mean_of_means, games, seed=3)


def test_probability_of_improvement_takes_memory_in_proportion_to_the_episodes():
    """Not episodes squared: compare on 100,000 episodes a game would allocate 9.3 GiB (an outside review)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 50, 20_000).astype(float), rng.integers(0, 50, 20_000).astype(float)  # many ties
    tracemalloc.start()
    try:
        p = probability_of_improvement([x], [y])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 50 * x.nbytes, f"{peak:,} bytes for two games of {len(x):,} episodes"
    wins = sum(int((y < a).sum()) + 0.5 * int((y == a).sum()) for a in x[:500])  # the definition, on a slice
    assert probability_of_improvement([x[:500]], [y]) == pytest.approx(wins / (500 * len(y)), abs=1e-12)
    assert 0.45 < p < 0.55


def test_every_statistic_takes_resamples_stacked_on_a_leading_axis():
    """The bootstrap hands a statistic every resample at once: each game an array [resamples, episodes]
    (games of different lengths, ties, one episode); row k of the answer is the statistic of row k."""
    from laya_eval.stats import mean_of_means

    rng = np.random.default_rng(3)
    lengths = [1, 5, 12, 2, 3, 7, 1, 4, 9, 6]  # ten games: sums over games must add in the 1-D order too
    x = [rng.integers(0, 4, (7, n)).astype(float) for n in lengths]
    y = [rng.normal(size=(7, n)) for n in lengths[::-1]]
    for stat in (iqm, mean, mean_of_means, median_of_means, optimality_gap):
        got = stat(x)
        assert np.shape(got) == (7,), stat.__name__
        assert np.array_equal(got, [stat([g[k] for g in x]) for k in range(7)]), stat.__name__
    big = ([np.tile(rng.normal(size=150), (7, 1))], [rng.normal(size=(7, 60))])  # 9,000 pairs: by ranks
    for a, b in ((x, y), ([g * 0 for g in x], [g * 0 for g in x]), big):  # then all ties
        got = probability_of_improvement(a, b)
        assert np.array_equal(got, [probability_of_improvement([g[k] for g in a], [g[k] for g in b]) for k in range(7)])


def test_the_bootstrap_asks_for_the_statistic_once_per_block_of_resamples_not_per_resample():
    """A 57-game run summarised after every game spent 526 s calling the statistics 2,000 times each."""
    calls = []

    def counted(scores):
        calls.append(1)
        return mean(scores)

    games = [RNG.normal(0.5, 0.3, 10) for _ in range(57)]
    lo, hi = stratified_bootstrap_ci(counted, games)
    assert lo < mean(games) < hi and len(calls) <= 4, len(calls)


@pytest.mark.parametrize("lengths", [(6, 6, 6), (6, 3, 9)], ids=["equal-episodes", "unequal-episodes"])
def test_the_task_bootstrap_draws_games_then_episodes_in_both_of_its_ways(lengths):
    """Games of equal episode counts are resampled a block at a time, others one resample at a time;
    both pair the groups' games and give the interval the draws imply."""
    from laya_eval.stats import mean_of_means, task_bootstrap_ci

    games = [np.full(n, float(i)) for i, n in enumerate(lengths)]  # no episode noise: game means 0, 1, 2
    lo, hi = task_bootstrap_ci(mean_of_means, games, reps=4000)
    assert (lo, hi) == (0.0, 2.0), "the same game drawn three times, 1 in 27 each way: beyond the 2.5% tails"
    same = task_bootstrap_ci(lambda x, y: np.asarray(mean_of_means(x)) - mean_of_means(y), games, games)
    assert same == (0.0, 0.0), "the same games drawn for both groups"
    noisy = [RNG.normal(0.5, 0.3, n) for n in lengths]
    assert task_bootstrap_ci(mean_of_means, noisy, seed=2) == task_bootstrap_ci(mean_of_means, noisy, seed=2)
    lo, hi = task_bootstrap_ci(mean_of_means, noisy, seed=2)
    assert lo < mean_of_means(noisy) < hi


@pytest.mark.parametrize("kind", BOOTSTRAPS)
@pytest.mark.parametrize("sizes", [(10, 10, 10), (10, 7, 12)], ids=["equal", "unequal"])
def test_a_curve_is_bootstrapped_as_each_of_its_points(kind, sizes):
    """A statistic that is a curve (the performance profile the report draws) gets, at each point, the
    interval that point gets alone: the same resamples. The report's band drew 500 of its own."""
    rng = np.random.default_rng(1)
    games = [rng.normal(0.5, 0.4, size=n) for n in sizes]
    taus = np.array([0.0, 0.25, 0.5, 1.0])
    lo, hi = bootstrap_ci(lambda s: performance_profile(s, taus), games, kind=kind, curve=True)
    assert lo.shape == hi.shape == taus.shape and (lo <= hi).all() and lo[0] > hi[-1]
    for j, t in enumerate(taus):
        alone = bootstrap_ci(lambda s, t=t: performance_profile(s, [t])[..., 0], games, kind=kind)
        assert (lo[j], hi[j]) == alone, t
    with pytest.raises(ValueError, match="one value per resample"):  # a curve where a value is asked for
        bootstrap_ci(lambda s: performance_profile(s, taus), games, kind=kind)
