"""How well does `atari-data generate` fan out, on local processes and on Ray?

The same generate run (expert2f, the built-in experts, four games) on 1 and on 2 workers: spawned
processes (`--workers`) and Ray (`--executor ray` on a local Ray instance of 1 and then 2 CPUs,
which is what a cluster's size decides). Fan-out efficiency is the 2-worker rate over twice the
1-worker rate (1.00 is perfect); the last column divides by twice the local single process instead, what
one core does without any executor. Ray starts, and its workers import everything, before the clock
starts (a standing cluster's case): a warm-up run at toy size goes first on each instance. The local
2-worker runs include spawning their pool, as every `generate --workers 2` does. Each figure is the
best of --repeats rounds that run every configuration once, in alternating order (until 2026-12-06
each configuration's repeats ran together, in a fixed order, and each run's layout was deleted
before the next, which slows this disk's next file creations).

    uv run python tools/bench/fan_out.py [--records 1500]
    uv run python tools/bench/fan_out.py --smoke   # two games, 30 records each (the tests run it)

The planner fans out by episode rather than by game; this measures the game fan-out only.
"""

from __future__ import annotations

import argparse
import itertools
import tempfile
import time
from pathlib import Path

from atari_data.produce.generate import GenerateConfig, generate
from laya_protocol.ray import connect

GAMES = ["Pong", "Breakout", "Freeway", "Boxing"]  # four, so that two workers share them evenly


def rate(root: Path, records: int, cap: int, executor: str, workers: int, games: list[str]) -> float:
    """Records/s of one generate run into ``root``, a new folder."""
    cfg = GenerateConfig(
        root=str(root.resolve()),  # Ray's workers may run in another directory
        games=games,
        source="expert2f",
        train_frames=records,
        val_frames=min(cap, records),
        min_train_episodes=1,
        baseline_episodes=0,
        decision_cap=cap,
        executor=executor,
        workers=workers,
    )
    t = time.perf_counter()
    metas = generate(cfg, progress=False)
    seconds = time.perf_counter() - t
    return sum(m["train"]["records"] + m["val"]["records"] for m in metas.values()) / seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1500, help="train records per game (default 1500)")
    ap.add_argument("--cap", type=int, default=500, help="decisions per episode at most (default 500)")
    ap.add_argument("--repeats", type=int, default=2, help="rounds, each configuration once a round (default 2)")
    ap.add_argument("--smoke", action="store_true", help="two games, 30 records each, one run: checks the bench runs")
    args = ap.parse_args(argv)
    games = GAMES
    if args.smoke:  # two games still share two workers evenly
        args.records, args.cap, args.repeats, games = 30, 30, 1, GAMES[:2]
    configs = [(executor, workers) for executor in ("local", "ray") for workers in (1, 2)]
    rates: dict[tuple[str, int], float] = dict.fromkeys(configs, 0.0)
    # Every layout is kept to the end (deleting many files slows this disk's next file creations for
    # minutes), and each round runs every configuration once, every other round in reverse order, so
    # that each sees the same stretch of this machine's drift.
    with tempfile.TemporaryDirectory(dir=".", prefix=".bench-fan-out-") as tmp:
        runs = (Path(tmp) / str(n) for n in itertools.count())
        for r in range(args.repeats):
            for executor, workers in configs[:: 1 if r % 2 == 0 else -1]:
                if executor == "ray":  # as `--executor ray` starts it, on a local instance of `workers` CPUs
                    ray = connect(num_cpus=workers)
                if not args.smoke and (executor == "ray" or workers == 1):
                    rate(next(runs), 10, 10, executor, workers, games)  # imports, Ray's worker start-up: untimed
                got = rate(next(runs), args.records, args.cap, executor, workers, games)
                rates[executor, workers] = max(rates[executor, workers], got)
                if executor == "ray":
                    ray.shutdown()
    rows = [(e, rates[e, 1], rates[e, 2], rates[e, 2] / (2 * rates[e, 1])) for e in ("local", "ray")]
    print(f"expert2f, {', '.join(games)}, {args.records} train records a game, episodes of at most {args.cap}\n")
    serial = rows[0][1]
    print(
        "| executor | 1 worker (records/s) | 2 workers (records/s) | fan-out efficiency "
        "| 2 workers / (2 x local 1 worker) |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for executor, one, two, eff in rows:
        print(f"| {executor} | {one:,.0f} | {two:,.0f} | {eff:.2f} | {two / (2 * serial):.2f} |")


if __name__ == "__main__":
    main()
