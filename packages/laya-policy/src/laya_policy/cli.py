"""`laya-policy`: play (and, as it lands, train) the Laya Vision policy."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="laya-policy", description="Laya Vision: a small vision-language policy "
                                "that plays games from the screen. Evaluate checkpoints with "
                                "`laya-eval run --policy laya:CKPT`.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pl = sub.add_parser("play", help="record a checkpoint playing one episode as a .gif or .mp4 (headless)",
                        description="Play one episode with the checkpoint (two-frame rule, auto-FIRE, sticky actions) "
                        "and write a video with the chosen action and its probability drawn on each frame.")
    pl.add_argument("--model", required=True, help="checkpoint directory")
    pl.add_argument("--game", required=True, help="ALE v5 game name, e.g. Pong")
    pl.add_argument("--video", required=True, help="output .gif or .mp4")
    pl.add_argument("--max-decisions", type=int, default=1000, help="(default %(default)s)")
    pl.add_argument("--seed", type=int, default=100_000, help="(default %(default)s)")
    pl.add_argument("--sample", action="store_true", help="draw actions from the probabilities instead of the top one")
    pl.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "play":
            from laya_policy.play import LayaPolicy
            from laya_policy.video import record_episode

            summary = record_episode(LayaPolicy(args.model, device=args.device), args.game, args.video,
                                     seed=args.seed, max_decisions=args.max_decisions, greedy=not args.sample)
            print(f"{summary['game']}: {summary['decisions']} decisions, score {summary['score']:g} "
                  f"-> {summary['video']}")
        return 0
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
