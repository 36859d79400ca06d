"""laya-eval's aggregate statistics against rliable's, on the same score matrices.

rliable (google-research/rliable) is what a user would score with instead. For each aggregate
(IQM, mean and median of per-game means, optimality gap, probability of improvement) both compute
the point estimate and a 95% stratified-bootstrap percentile interval (runs resampled within each
game, the games kept) with the same number of resamples, in one run:

- agreement: point estimates must be equal (to 1e-12); intervals differ only by bootstrap noise,
  shown as the largest endpoint difference over the interval's width;
- time: seconds for every interval of one matrix, and rliable's time over ours, after an untimed
  call of each at 50 resamples; with ``--repeats`` above 1, the best of that many rounds that time
  each side once (``_timing.in_rounds``: alternating order). One round is the default: rliable takes
  20-140 s a matrix, hundreds of times ours, far past what drift between the two calls can move.

    uv run python tools/bench/stats.py [--reps 2000]
    uv run python tools/bench/stats.py --smoke   # 200 resamples, one small matrix (the tests run it)

Goal: the same point estimates, and intervals at least as fast as rliable's.
"""

from __future__ import annotations

import argparse
import signal
import warnings

import numpy as np
from _timing import in_rounds

from atari_data.signals import kept
from laya_eval import stats

# Imported here, so that neither side's timing includes imports; rliable's arch imports statsmodels,
# which imports polars, whose import takes Ctrl-C over (atari_data.signals)
with kept(signal.SIGINT):
    from rliable import library as rly
    from rliable import metrics

SHAPES = ((10, 26), (5, 57), (100, 8))  # (runs, games): Atari 100k, the full 57, many seeds


def ours(x: np.ndarray, y: np.ndarray, reps: int) -> tuple[list[float], list[tuple[float, float]]]:
    gx, gy = list(x.T), list(y.T)
    funcs = (stats.iqm, stats.mean_of_means, stats.median_of_means, stats.optimality_gap)
    points = [f(gx) for f in funcs] + [stats.probability_of_improvement(gx, gy)]
    cis = [stats.stratified_bootstrap_ci(f, gx, reps=reps, seed=1) for f in funcs]
    cis.append(stats.stratified_bootstrap_ci(stats.probability_of_improvement, gx, gy, reps=reps, seed=1))
    return points, cis


def theirs(x: np.ndarray, y: np.ndarray, reps: int) -> tuple[list[float], list[tuple[float, float]]]:
    def aggregates(s):
        return np.array(
            [
                metrics.aggregate_iqm(s),
                metrics.aggregate_mean(s),
                metrics.aggregate_median(s),
                metrics.aggregate_optimality_gap(s),
            ]
        )

    rs = np.random.RandomState(1)  # rliable 1.2 passes it on to arch, which warns that it is deprecated
    warnings.filterwarnings("ignore", "random_state is deprecated", FutureWarning)
    point, ci = rly.get_interval_estimates({"x": x}, aggregates, reps=reps, random_state=rs)
    poi_point, poi_ci = rly.get_interval_estimates(
        {"x,y": [x, y]}, metrics.probability_of_improvement, reps=reps, random_state=rs
    )
    points = [float(v) for v in point["x"]] + [float(poi_point["x,y"])]
    cis = [(float(lo), float(hi)) for lo, hi in ci["x"].T] + [tuple(float(v) for v in np.ravel(poi_ci["x,y"]))]
    return points, cis  # type: ignore[return-value]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--reps", type=int, default=stats.REPS, help="bootstrap resamples (default %(default)s, laya-eval's)"
    )
    ap.add_argument(
        "--repeats", type=int, default=1, help="timed rounds, each side once a round (default 1: rliable takes minutes)"
    )
    ap.add_argument("--smoke", action="store_true", help="200 resamples, two small matrices: checks the bench runs")
    args = ap.parse_args(argv)
    # the smoke's second matrix has enough runs (100 x 100 pairs a game) for P(X > Y)'s rank path,
    # which the full run's 100 x 8 takes
    shapes = ((5, 4), (100, 2)) if args.smoke else SHAPES
    assert any(runs * runs > stats.PAIRWISE for runs, _ in shapes), "no matrix takes P(X > Y)'s rank path"
    if args.smoke:
        args.reps, args.repeats = 200, 1
    from importlib import metadata

    names = ("IQM", "mean", "median", "optimality gap", "P(X > Y)")
    print(
        f"rliable {metadata.version('rliable')}, {args.reps} resamples, 95% percentile intervals; "
        f"seconds: best of {args.repeats} round(s), each side once a round, after an untimed call of each\n"
    )
    print(
        "| runs x games | ours (s) | rliable (s) | speed ratio | largest point difference "
        "| largest interval difference / width | goal |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for runs, games in shapes:
        rng = np.random.default_rng(runs * 1000 + games)
        x = rng.normal(0.6, 0.5, size=(runs, games))
        y = rng.normal(0.5, 0.5, size=(runs, games))
        ours(x, y, 50), theirs(x, y, 50)  # first-use costs, untimed, at a few resamples: rliable takes minutes
        seconds, got = in_rounds(
            {"ours": lambda x=x, y=y: ours(x, y, args.reps), "rliable": lambda x=x, y=y: theirs(x, y, args.reps)},
            args.repeats,
            warm=False,
        )
        (p_ours, ci_ours), (p_theirs, ci_theirs) = got["ours"], got["rliable"]  # seeded: the same every call
        t_ours, t_theirs = min(seconds["ours"]), min(seconds["rliable"])
        dp = max(abs(a - b) for a, b in zip(p_ours, p_theirs, strict=True))
        assert dp < 1e-12, f"point estimates differ by {dp} ({names})"
        d_ci = max(
            max(abs(a[0] - b[0]), abs(a[1] - b[1])) / max(b[1] - b[0], 1e-12)
            for a, b in zip(ci_ours, ci_theirs, strict=True)
        )
        print(
            f"| {runs} x {games} | {t_ours:.2f} | {t_theirs:.2f} | {t_theirs / t_ours:.2f}x | {dp:.1e} | {d_ci:.3f} "
            "| >= 1x |"
        )


if __name__ == "__main__":
    main()
