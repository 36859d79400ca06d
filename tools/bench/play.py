"""Two-frame play with and without the FrameFeatureCache.

Decisions/s of a checkpoint playing Breakout through laya-eval (8 episodes in lockstep, actions
sampled so that the episodes differ, two frames a decision, device-side preprocessing) with the
cache on and off, and the cache's hit rate, in one
run. The checkpoint is a random tiny Idefics3 whose vision tower outweighs its language model, so
play is encoder-bound, as it is with SmolVLM at 512.

    uv run python tools/bench/play.py [--decisions 120] [--episodes 8] [--size 256] [--repeats 3] [--threads 2]

Both sides get an untimed warm-up play first (torch's first calls set up kernels and grow the
allocator) and the same torch threads; the timed plays alternate off, on, off, on... and each side's
best is kept.

Goals: hit rate >= 0.45; with the cache >= 1.5x the decisions/s without.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from transformers import Idefics3Model

from laya_eval.runner import play
from laya_policy.backbone import tiny_config, tiny_tokenizer
from laya_policy.checkpoint import AgentConfig, save_checkpoint
from laya_policy.model import ChoicePolicy
from laya_policy.play import LayaPolicy
from laya_policy.presets import TinySize
from laya_protocol.protocol import Protocol
from laya_protocol.seeds import EVAL_SEED_BASE


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=120)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads, both sides")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="8 decisions of 2 episodes at 64 px: checks the bench runs (the tests run it)",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.decisions, args.episodes, args.size, args.repeats = 8, 2, 64, 1
    before = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        _measure(args)
    finally:
        torch.set_num_threads(before)  # the caller's back (the tests run this in their own process)


def _measure(args) -> None:
    torch.manual_seed(0)
    tok = tiny_tokenizer()
    size = TinySize(
        image_size=args.size,
        vision_hidden=256,
        vision_layers=6,
        vision_intermediate=512,
        text_hidden=64,
        text_layers=1,
        text_intermediate=128,
    )
    policy = ChoicePolicy(Idefics3Model(tiny_config(tok, size)), tok)
    proto = Protocol.ale_v5("Breakout", decision_cap=args.decisions)
    best: dict[bool, float] = {False: 0.0, True: 0.0}
    hit = None
    with tempfile.TemporaryDirectory() as tmp:
        save_checkpoint(policy, AgentConfig(image_size=args.size, preprocess="gpu", frames=2), f"{tmp}/ckpt")
        players = {cache: LayaPolicy(f"{tmp}/ckpt", cache=cache) for cache in (False, True)}
        warm = Protocol.ale_v5("Breakout", decision_cap=min(8, args.decisions))
        for laya in players.values():  # untimed: each side's first calls
            play(laya, "Breakout", warm, args.episodes, EVAL_SEED_BASE, greedy=False)
        for r in range(args.repeats):  # the machine's speed drifts: neither side always goes first
            for cache, laya in list(players.items())[:: 1 if r % 2 == 0 else -1]:
                before = (laya.cache.hits, laya.cache.misses) if cache else (0, 0)
                t = time.perf_counter()
                # sampled: the episodes diverge
                ep = play(laya, "Breakout", proto, args.episodes, EVAL_SEED_BASE, greedy=False)
                rate = sum(ep.steps) / (time.perf_counter() - t)
                if cache and rate > best[cache]:  # the best round's own, as its rate is
                    hits, misses = laya.cache.hits - before[0], laya.cache.misses - before[1]
                    hit = hits / max(1, hits + misses)
                best[cache] = max(best[cache], rate)
    rows = [(False, best[False], None), (True, best[True], hit)]
    base = rows[0][1]
    print(
        f"Breakout, {args.episodes} episodes x {args.decisions} decisions, two frames, {args.size}px, "
        f"{torch.get_num_threads()} threads, best of {args.repeats} alternating, after an untimed warm-up"
    )
    print("| cache | decisions/s | speed-up | hit rate | goal |\n| --- | ---: | ---: | ---: | ---: |")
    for cache, rate, hit in rows:
        goal = "hit rate >= 0.45, >= 1.5x" if cache else ""
        print(
            f"| {'on' if cache else 'off'} | {rate:.1f} | {rate / base:.2f}x | {'' if hit is None else f'{hit:.2f}'} "
            f"| {goal} |"
        )


if __name__ == "__main__":
    main()
