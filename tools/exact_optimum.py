"""The best score any policy can reach in a game's first N decisions, by exhaustive search.

    uv run python tools/exact_optimum.py --game Freeway --decisions 1000   # about 4 minutes here

With sticky actions off the emulator is deterministic, so the states reachable after d decisions
form a finite set. The search keeps all of them, one per distinct RAM (on the games this is for,
the RAM is the whole game state), and drops every state whose score is below the best score any
state has reached by then: a state a point behind cannot end ahead on a game like Freeway, where
the leader can always wait. Every kept state tries every button of the minimal set, held for the
protocol's 4 frames, each decision. The result is an upper bound for what any policy, expert or
planner, scores under the same protocol without sticky repeats, and the decision at which each
score is first reached. The search stops with a message where the states outgrow ``--max-states``
(games whose RAM changes with every move need another method).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from laya_protocol.games import minimal_actions, rom_id
from laya_protocol.protocol import Protocol


def best_score(game: str, decisions: int, max_states: int = 20_000, seed: int = 0) -> tuple[float, dict[int, int], int]:
    """(best score, first decision after which each score is reached, most states kept at once)."""
    os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("random_seed", seed)
    ale.loadROM(roms.get_rom_path(rom_id(game)))
    ale.reset_game()
    skip = Protocol.ale_v5(game).frameskip
    legal = {a.name: a for a in ale.getLegalActionSet()}
    buttons = [legal[name] for name in minimal_actions(game)]
    states = {ale.getRAM().tobytes(): (ale.cloneState(), 0.0)}
    best, first, peak = 0.0, {}, 1
    for d in range(decisions):
        kept: dict[bytes, tuple] = {}
        top = best
        for state, score in states.values():
            for button in buttons:
                ale.restoreState(state)
                total = score + sum(ale.act(button) for _ in range(skip))
                if total < top or ale.game_over():
                    continue
                if total > top:
                    kept, top = {}, total
                kept.setdefault(ale.getRAM().tobytes(), (ale.cloneState(), total))
        if not kept:
            break
        if len(kept) > max_states:
            raise SystemExit(f"{game}: {len(kept):,} distinct states after {d + 1} decisions (over --max-states)")
        states, peak = kept, max(peak, len(kept))
        if top > best:
            best = top
            first[int(best)] = d + 1
    return best, first, peak


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--game", default="Freeway")
    ap.add_argument("--decisions", type=int, default=1000, help="decisions from reset (default 1000)")
    ap.add_argument("--max-states", type=int, default=20_000, help="distinct states kept at most (bounds memory)")
    args = ap.parse_args(argv)
    t = time.perf_counter()
    best, first, peak = best_score(args.game, args.decisions, args.max_states)
    print(f"{args.game}: best score {best:g} in {args.decisions} decisions (sticky actions off)")
    print(f"first reached after decision: {first}")
    print(f"states kept at most: {peak:,}; {time.perf_counter() - t:.0f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
