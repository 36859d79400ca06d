"""The best score in a game's first N decisions, by a search over every distinct emulator RAM.

    uv run python tools/exact_optimum.py --game Freeway --decisions 1000
    uv run python tools/exact_optimum.py --game Freeway --decisions 120 --no-prune   # checks the pruning

With sticky actions off the emulator is deterministic, so the states reachable after d decisions
form a finite set. The search keeps them one per distinct RAM (on Freeway the RAM is the game's
state: the cars move on their own and the chicken's position, stun and score are in it), each
trying every button of the minimal set, held for the protocol's 4 frames, at every decision.

Pruning, an assumption checked rather than proved: after each decision only the states with the
best score so far are kept. On Freeway a state a crossing behind is at best about to score while
the leader starts a crossing. Checked once over Freeway's first 120 decisions: the unpruned search
(``--no-prune``, 3,394 states at most, 3 minutes) found the same best and the same decisions as the
pruned one (391 states, 24 s). Under that assumption the result bounds what any policy, expert or
planner scores in N decisions under the same protocol without sticky repeats. The search stops
with a message when the states outgrow ``--max-states`` (games whose RAM changes with every move
need another method).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from atari_data.play.experts.planner import sticky_free_emulator
from laya_protocol.protocol import Protocol


def best_score(
    game: str, decisions: int, max_states: int = 20_000, prune: bool = True
) -> tuple[float, dict[int, int], int]:
    """(best score, decision after which each score is first reached, most states kept at once)."""
    ale = sticky_free_emulator(game)
    ale.reset_game()
    skip = Protocol.ale_v5(game).frameskip
    buttons = ale.getMinimalActionSet()
    states = {ale.getRAM().tobytes(): (ale.cloneState(), 0.0)}
    best, first, peak = -math.inf, {}, 1
    for d in range(decisions):
        kept: dict[bytes, tuple] = {}
        top = -math.inf  # this decision's best: a game's scores may be negative
        for state, score in states.values():
            for button in buttons:
                ale.restoreState(state)
                total = score + sum(ale.act(button) for _ in range(skip))  # after game over: 0, same RAM
                if prune and total < top:
                    continue
                if prune and total > top:
                    kept = {}
                top = max(top, total)
                key = ale.getRAM().tobytes()
                if key not in kept or kept[key][1] < total:
                    kept[key] = (ale.cloneState(), total)
                if len(kept) > max_states:
                    raise SystemExit(
                        f"{game}: over {max_states:,} distinct states after {d + 1} decisions (--max-states)"
                    )
        states, peak = kept, max(peak, len(kept))
        if top > best:
            for score in range(int(max(best, 0)) + 1, int(top) + 1):
                first[score] = d + 1
            best = top
    return best, first, peak


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="Freeway")
    ap.add_argument("--decisions", type=int, default=1000, help="decisions from reset (default 1000)")
    ap.add_argument("--max-states", type=int, default=20_000, help="distinct states kept at most (bounds memory)")
    ap.add_argument("--no-prune", action="store_true", help="keep states behind on score too (the check)")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    best, first, peak = best_score(args.game, args.decisions, args.max_states, prune=not args.no_prune)
    print(f"{args.game}: best score {best:g} in {args.decisions} decisions (sticky actions off)")
    print(f"first reached after decision: {first}")
    print(f"states kept at most: {peak:,}; {time.perf_counter() - t:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
