"""How fast does `atari-data generate` turn emulator decisions into expert2f records?

The whole pipeline (epsilon-expert play, PNG encoding of frame and previous frame, writing,
meta.json) against raw ALE stepping under the same protocol (4 frames per decision, sticky
actions, random moves, no screen reads), both with the same number of worker processes, one game
per worker, in one run: the best of --repeats rounds that time each side once, alternating which
goes first (``_timing.in_rounds``; until 2026-12-06 each side ran once, raw ALE first). Raw ALE's
workers are started and warmed before the clock; each generate starts its own, as a user's does.

    uv run python tools/bench/generate.py [--records 8000] [--workers 2] [--dir .] [--repeats 3]

Episodes are capped at --episode-decisions so that every decision played becomes a record
(records and decisions then count the same thing). The layout is written under --dir: file
creation on these shared disks is slow and noisy, so put it where the data would go.

Goal: pipeline records/s >= 0.5x raw ALE decisions/s.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import tempfile

import numpy as np
from _timing import in_rounds

from atari_data.play.ale import AtariGame
from atari_data.produce.generate import GenerateConfig, generate

GAMES = ["Pong", "Breakout", "Freeway", "Boxing"]


def raw_decisions(args) -> int:
    game, n = args
    g = AtariGame(game)
    rng = np.random.default_rng(0)
    g.reset(0)
    for _ in range(n):
        if g.done:
            g.reset(0)
        g.act(int(rng.integers(len(g.actions))))
    return n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=8000, help="train records per game")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--episode-decisions", type=int, default=500)
    ap.add_argument("--dir", default=".", help="where to write the temporary layout (default: here)")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds, each side once a round (default 3)")
    ap.add_argument(
        "--smoke", action="store_true", help="100 records a game, two workers: checks the bench runs (the tests run it)"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.records, args.episode_decisions, args.repeats = 100, 100, 1  # two workers: the pool the full run times
    games = GAMES[: args.workers]

    # Each generate writes a layout of its own, kept to the end: deleting many files slows this disk's
    # next file creations for minutes, which the next side timed would pay.
    runs = itertools.count()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix=".bench-generate-") as root:

        def pipeline() -> int:
            cfg = GenerateConfig(
                root=f"{root}/{next(runs)}",
                games=games,
                source="expert2f",
                train_frames=args.records,
                val_frames=args.episode_decisions,
                min_train_episodes=1,
                baseline_episodes=0,
                decision_cap=args.episode_decisions,
                workers=args.workers,
            )
            metas = generate(cfg, progress=False)
            return sum(m["train"]["records"] + m["val"]["records"] for m in metas.values())

        with mp.get_context("spawn").Pool(args.workers) as pool:
            pool.map(raw_decisions, [(g, 10) for g in games])  # warm the workers up
            sides = {"raw": lambda: sum(pool.map(raw_decisions, [(g, args.records) for g in games])), "ours": pipeline}
            seconds, counts = in_rounds(sides, args.repeats, warm=False)
    t_raw, t_gen, n_raw, n_rec = min(seconds["raw"]), min(seconds["ours"]), counts["raw"], counts["ours"]

    raw, rec = n_raw / t_raw, n_rec / t_gen
    print(f"{len(games)} games, {args.workers} workers, expert2f, {n_rec} records, best of {args.repeats} rounds")
    print("| what | per second | ratio | goal |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| raw ALE decisions | {raw:,.0f} | 1.00x | |")
    print(f"| generate expert2f records | {rec:,.0f} | {rec / raw:.2f}x | >= 0.5x |")


if __name__ == "__main__":
    main()
