"""`laya-policy`: play (and, as it lands, train) the Laya Vision policy."""

from __future__ import annotations

import argparse
import sys

from atari_data.errors import AtariDataError


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
    t = sub.add_parser("train", help="train the policy on an atari-data layout (durable: rerun to resume)",
                       description="Train on the records of a layout (balanced over games or (game, source)), with "
                       "soft targets, evaluations into OUT/log.jsonl, the best checkpoint by validation NLL in "
                       "OUT/best, state in OUT/state.pt (rerun the same command to resume) and a calibrated OUT/final.")
    from laya_policy.backbone import SMOLVLM
    from laya_policy.train import TrainConfig

    d = TrainConfig(data="")
    t.add_argument("--data", required=True, help="atari-data layout root")
    t.add_argument("--out", default=d.out, help="run folder (default %(default)s)")
    t.add_argument("--sources", type=lambda s: s.split(","), help="comma-separated sources (default all)")
    t.add_argument("--games", type=lambda s: s.split(","), help="comma-separated games (default all)")
    t.add_argument("--frames", type=int, choices=(1, 2), default=d.frames, help="(default %(default)s)")
    t.add_argument("--model", default=d.model, help=f"tiny, a Hub id such as {SMOLVLM}, or a local directory "
                   "(default %(default)s)")
    t.add_argument("--init-from", help="checkpoint to continue from (e.g. for DAgger)")
    t.add_argument("--image-size", type=int, default=d.image_size, help="(default %(default)s)")
    t.add_argument("--preprocess", choices=("gpu", "processor"), default=d.preprocess, help="(default %(default)s)")
    t.add_argument("--batch", type=int, default=d.batch, help="(default %(default)s)")
    t.add_argument("--steps", type=int, default=d.steps, help="(default %(default)s)")
    t.add_argument("--max-minutes", type=float, default=d.max_minutes, help="time budget, resumed runs included "
                   "(default %(default)s)")
    t.add_argument("--balance", choices=("game", "game_source"), default=d.balance, help="(default %(default)s)")
    t.add_argument("--freeze", choices=("vision", "none"), default=d.freeze, help="(default %(default)s)")
    t.add_argument("--evals", type=int, default=d.evals, help="evaluations during the run (default %(default)s)")
    t.add_argument("--calibrate-on", type=lambda s: s.split(","), help="held-out games for the temperature fit")
    t.add_argument("--seed", type=int, default=d.seed, help="(default %(default)s)")
    t.add_argument("--device", default=d.device, help="(default %(default)s)")
    t.add_argument("--restart", action="store_true", help="start over instead of resuming OUT/state.pt")
    t.add_argument("--crash-at-step", type=int, help="raise once at this step (to exercise resuming)")
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
        if args.command == "train":
            from laya_policy.train import TrainConfig, train

            cfg = TrainConfig(data=args.data, out=args.out, sources=args.sources, games=args.games, frames=args.frames,
                              model=args.model, init_from=args.init_from, image_size=args.image_size,
                              preprocess=args.preprocess, batch=args.batch, steps=args.steps,
                              max_minutes=args.max_minutes, balance=args.balance, freeze=args.freeze,
                              evals=args.evals, calibrate_on=args.calibrate_on, seed=args.seed, device=args.device,
                              restart=args.restart, crash_at_step=args.crash_at_step)
            summary = train(cfg)
            print(f"{summary['steps']} steps in {summary['minutes']:.1f} min; best {summary['best']}; "
                  f"checkpoint {args.out}/final")
        return 0
    except (OSError, ValueError, AtariDataError) as e:
        print(f"error: {e.render() if isinstance(e, AtariDataError) else e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
