"""How much of the emulator's speed does the planning expert keep, and how many decisions a second is that?

Per game, in one run on one core: raw ALE stepping (``ALEInterface.act`` in a Python loop with
random moves, no screen reads, the emulator's own ceiling from Python) against the planner's
rollouts (restore the state, draw sticky moves, step, read RAM for novelty, score), counted in
emulator frames per second of the planner's wall time. The planner plays the game greedily from
reset for --decisions decisions.

    uv run python tools/bench/planner.py [--games Pong,Breakout,Boxing,MsPacman] [--decisions 40]
        [--planner-frames 3000]

Goal: the planner's emulator frames/s >= 0.7x raw.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _timing import in_rounds

from atari_data.play.ale import AtariGame, episode_seed, play_episode
from atari_data.play.experts.planner import DEFAULT_FRAMES, Planner, sticky_free_emulator
from laya_protocol.config import csv


def raw_fps(game: str, frames: int) -> float:
    ale = sticky_free_emulator(game)
    actions = ale.getMinimalActionSet()
    moves = np.random.default_rng(0).integers(len(actions), size=frames)
    start = time.perf_counter()
    for m in moves:
        ale.act(actions[m])
        if ale.game_over():
            ale.reset_game()
    return frames / (time.perf_counter() - start)


def planner_rates(game: str, decisions: int, budget: int) -> tuple[float, float]:
    """(emulator frames/s inside the planner, decisions/s) over ``decisions`` greedy decisions."""
    g = AtariGame(game)
    planner = Planner(game, budget=budget)
    start = time.perf_counter()
    n = 0
    for _ in play_episode(g, episode_seed(0, game, 0), lambda _d: int(np.argmax(planner.probs(g))), decisions):
        n += 1
    wall = time.perf_counter() - start
    return planner.frames_used / wall, n / wall


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--games", type=csv, default=["Pong", "Breakout", "Boxing", "MsPacman"])
    ap.add_argument("--decisions", type=int, default=40)
    ap.add_argument("--planner-frames", type=int, default=DEFAULT_FRAMES)
    ap.add_argument(
        "--rounds", type=int, default=2, help="rounds, each side once a round, in alternating order (best kept)"
    )
    ap.add_argument(
        "--smoke", action="store_true", help="one game, 2 rounds of 3 decisions of 200 frames (the tests run it)"
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.games, args.decisions, args.planner_frames, args.rounds = ["Pong"], 3, 200, 2
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # one core for both sides (an OMP setting after numpy's import did nothing)
    try:
        budget = f"planner budget {args.planner_frames:,} emulator frames per decision"
        print(f"{budget}, {args.decisions} decisions, one core, best of {args.rounds} rounds in alternating order")
        print("| game | raw ALE frames/s | planner frames/s | ratio | planner decisions/s | goal |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        frames = max(2_000, args.planner_frames * args.decisions // 2)  # raw stepping's, every game
        for game in args.games:
            # the sides time themselves, so each keeps its rates of every round; in_rounds orders them
            rates: dict[str, list[tuple[float, float]]] = {"raw": [], "planner": []}
            sides = {
                "raw": lambda game=game, out=rates["raw"]: out.append((raw_fps(game, frames), 0.0)),
                "planner": lambda game=game, out=rates["planner"]: out.append(
                    planner_rates(game, args.decisions, args.planner_frames)
                ),
            }
            in_rounds(sides, args.rounds, warm=False)
            raw, (fps, dps) = max(rates["raw"])[0], max(rates["planner"])
            print(f"| {game} | {raw:,.0f} | {fps:,.0f} | {fps / raw:.2f}x | {dps:.2f} | >= 0.7x |", flush=True)
    finally:
        os.sched_setaffinity(0, cores)  # the caller's cores back (the tests run this in their own process)


if __name__ == "__main__":
    main()
