"""Measure experts against uniform random on the same episodes and print a Markdown table.

    uv run python tools/expert_table.py                      # built-in experts, 10 episodes of 4,500
    uv run python tools/expert_table.py --experts planner,planner:builtin,builtin \\
        --games Boxing,Freeway,Pong,Qbert,MsPacman,Breakout,SpaceInvaders,Enduro \\
        --episodes 2 --cap 1000 --planner-frames 1000 --workers 2

Every policy plays greedily (the expert's argmax) under the ALE v5 protocol (sticky actions 0.25,
auto-FIRE), each policy on the same ALE seeds (those `atari-data generate` uses for its expert
baselines), episodes capped at ``--cap`` decisions. The margin column is the policy's mean minus
random's, as a fraction of the reference table's margin (upstream CleanRL PPO experts, measured
over 4,500 decisions: compare a shorter cap with that in mind). Episodes run on ``--workers``
processes; decisions/s is per process (per core).
"""

import argparse
import multiprocessing as mp
import time

import numpy as np

from atari_data.play.ale import AtariGame, episode_seed, play_episode
from atari_data.play.experts import load_expert
from atari_data.play.experts.builtin import BUILTIN
from atari_data.play.experts.planner import DEFAULT_FRAMES
from atari_data.produce.generate import behaviour_rng
from laya_eval.baselines import REFERENCE
from laya_protocol.config import csv
from laya_protocol.protocol import BASELINE_CAP, Protocol
from laya_protocol.seeds import EXPERT_BASELINE_FROM


def episode(task):
    """(game, policy, episode index) -> (score, decisions, seconds)."""
    game_name, spec, i, cap, frames, seed = task
    game = AtariGame(game_name, Protocol.ale_v5(game_name, decision_cap=cap))
    ale_seed = episode_seed(seed, game_name, EXPERT_BASELINE_FROM + i)
    if spec == "random":
        rng = behaviour_rng(seed, game_name, EXPERT_BASELINE_FROM + i)
        choose = lambda _d: int(rng.integers(len(game.actions)))  # noqa: E731
    else:
        expert = load_expert(spec, game_name, frames)
        expert.reset()
        choose = lambda _d: int(np.argmax(expert.probs(game)))  # noqa: E731
    start, n = time.perf_counter(), 0
    for _ in play_episode(game, ale_seed, choose, cap):
        n += 1
    return game.score, n, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experts", type=csv, default=["builtin"], help="expert specs, comma-separated (random is added)")
    ap.add_argument("--games", type=csv, default=sorted(BUILTIN))
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--cap", type=int, default=BASELINE_CAP, help="decisions per episode at most")
    ap.add_argument("--planner-frames", type=int, default=DEFAULT_FRAMES)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    policies = ["random", *args.experts]
    tasks = [
        (g, p, i, args.cap, args.planner_frames, args.seed)
        for g in args.games
        for p in policies
        if "builtin" not in p or g in BUILTIN  # a built-in expert (or base) exists for few games
        for i in range(args.episodes)
    ]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = dict(zip(tasks, pool.map(episode, tasks, chunksize=1), strict=True))

    print(f"Greedy, ALE v5 protocol, episodes capped at {args.cap:,} decisions, {args.episodes} episodes each", end="")
    print(
        f", planner budget {args.planner_frames:,} frames per decision."
        if any("planner" in p for p in policies)
        else "."
    )
    print()
    print("| game | policy | score (mean ± std) | margin over random / reference margin | decisions/s per core |")
    print("| --- | --- | ---: | ---: | ---: |")
    for g in args.games:
        random_mean = float(np.mean([results[t][0] for t in tasks if t[0] == g and t[1] == "random"]))
        ref = REFERENCE.get(g)
        for p in policies:
            runs = [results[t] for t in tasks if t[0] == g and t[1] == p]
            if not runs:
                continue
            scores = np.array([r[0] for r in runs])
            rate = sum(r[1] for r in runs) / sum(r[2] for r in runs)
            margin = (
                ""
                if p == "random" or ref is None
                else f"{(scores.mean() - random_mean) / (ref.expert - ref.random):.2f}"
            )
            print(f"| {g} | {p} | {scores.mean():.1f} ± {scores.std():.1f} | {margin} | {rate:,.0f} |", flush=True)


if __name__ == "__main__":
    main()
