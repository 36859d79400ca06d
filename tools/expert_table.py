"""Measure the built-in experts against uniform random and print the README table.

    uv run python tools/expert_table.py [--episodes 10] [--seed 0]

Each game: the greedy expert and a uniform-random policy, ALE v5 protocol (sticky actions 0.25,
auto-FIRE), episodes capped at 4,500 decisions, seeds as `atari-data generate` uses for baselines.
"""

import argparse

import numpy as np

from atari_data.play.ale import AtariGame
from atari_data.play.experts import load_expert
from atari_data.play.experts.builtin import BUILTIN
from atari_data.produce.generate import GenerateConfig, measure_baselines
from laya_protocol.protocol import BASELINE_CAP, Protocol

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--episodes", type=int, default=10)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()

print("| game | expert (mean ± std) | random (mean ± std) | episodes |")
print("| --- | ---: | ---: | ---: |")
for game in sorted(BUILTIN):
    cfg = GenerateConfig(
        root=".", games=[game], baseline_episodes=args.episodes, decision_cap=BASELINE_CAP, seed=args.seed
    )
    b = measure_baselines(
        AtariGame(game, Protocol.ale_v5(game, decision_cap=BASELINE_CAP)), load_expert("builtin", game), cfg
    )
    e, r = np.array(b["expert_scores"]), np.array(b["random_scores"])
    print(f"| {game} | {e.mean():.1f} ± {e.std():.1f} | {r.mean():.1f} ± {r.std():.1f} | {args.episodes} |", flush=True)
