"""The ViZDoom basic expert against random buttons and always-ATTACK (atari-data's README table).

    uv run python tools/doom_expert_table.py [--episodes 100]

Episodes are seeded 100000+i (disjoint from the data's 1000+ and 2000+), 4 tics per decision.
"""

import argparse

from atari_data.play import doom
from laya_protocol.seeds import EVAL_SEED_BASE


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100)
    args = ap.parse_args()
    game = doom.make_game("basic")
    names = doom.buttons(game)
    seeds = range(EVAL_SEED_BASE, EVAL_SEED_BASE + args.episodes)
    rows = [
        ("expert (labels buffer)", doom.epsilon_expert(0.0, len(names))),
        ("random buttons", lambda s, e, r: int(r.integers(len(names)))),
        ("always ATTACK", lambda s, e, r: names.index("ATTACK")),
    ]
    print("| policy | mean reward | kill rate | steps per episode | episodes |\n| --- | ---: | ---: | ---: | ---: |")
    for name, behave in rows:
        r = doom.episode_scores(game, seeds, behave)
        print(f"| {name} | {r['mean']:+.1f} | {r['kill_rate']:.0%} | {r['steps']:.1f} | {r['episodes']} |")
    game.close()


if __name__ == "__main__":
    main()
