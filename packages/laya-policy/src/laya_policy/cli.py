"""`laya-policy`: train the Laya Vision policy, play it, and run DAgger rounds."""

from __future__ import annotations

import argparse
import sys

from atari_data.errors import AtariDataError
from laya_eval.errors import EvalError
from laya_protocol.protocol import EVAL_DECISION_CAP
from laya_protocol.seeds import EVAL_SEED_BASE


def _names(text: str) -> list[str]:
    return [n for n in text.split(",") if n]


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
    pl.add_argument("--seed", type=int, default=EVAL_SEED_BASE, help="(default %(default)s)")
    pl.add_argument("--sample", action="store_true", help="draw actions from the probabilities instead of the top one")
    pl.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    pl.add_argument("--cuda-graph", action="store_true", help="replay the language model and head as one CUDA graph "
                    "per batch shape (needs --device cuda; same answers, less launch overhead)")
    t = sub.add_parser("train", help="train the policy on atari-data records (durable: rerun to resume)",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Train on atari-data records, balanced over games or (game, source), with soft "
                       "targets; evaluations go to OUT/log.jsonl and print as a table, the selected checkpoint to "
                       "OUT/best, state to OUT/state.pt (rerun the same command to resume), a calibrated checkpoint "
                       "to OUT/final.", epilog="examples:\n"
                       "  laya-policy train --data data/atari --games Pong,Freeway --max-minutes 15 --out runs/tiny\n"
                       "  laya-policy train --data out/packed --sources expert2f --out runs/packed\n"
                       "  torchrun --nproc-per-node 2 -m laya_policy.cli train --data data/atari --out runs/ddp")
    from laya_policy.backbone import SMOLVLM
    from laya_policy.train import DEFAULT_LRS, TrainConfig

    d = TrainConfig(data="")
    t.add_argument("--data", required=True, help="an atari-data layout root, a packed repository folder "
                   "(atari-data pack), or its Hub id")
    t.add_argument("--out", default=d.out, help="run folder (default %(default)s)")
    t.add_argument("--sources", type=_names, help="comma-separated sources (default all)")
    t.add_argument("--games", type=_names, help="comma-separated games (default all)")
    t.add_argument("--frames", type=int, choices=(1, 2), default=d.frames, help="(default: --init-from's, else 2)")
    t.add_argument("--model", default=d.model, help=f"tiny (random weights, built here), a Hub id such as {SMOLVLM}, "
                   "or a local directory (default: --init-from's backbone, else tiny)")
    t.add_argument("--init-from", help="checkpoint to continue from (e.g. after a DAgger round)")
    t.add_argument("--image-size", type=int, default=d.image_size, help="(default: --init-from's, else the "
                   "pretrained backbone's vision config, else 128 for a preset)")
    t.add_argument("--preprocess", choices=("gpu", "processor"), default=d.preprocess,
                   help="device-side resize (gpu) or SmolVLM's processor (default: --init-from's, else gpu)")
    t.add_argument("--batch", type=int, default=d.batch, help="per process (default %(default)s)")
    t.add_argument("--passes", type=float, default=d.passes, help="passes over the training records "
                   "(default %(default)s)")
    t.add_argument("--steps", type=int, help="an explicit step count instead of --passes")
    t.add_argument("--max-minutes", type=float, default=d.max_minutes, help="time budget, resumed runs included; "
                   "the learning-rate schedule follows whichever of steps and time runs out first "
                   "(default %(default)s)")
    t.add_argument("--balance", choices=("game", "game_source"), default=d.balance, help="(default %(default)s)")
    t.add_argument("--freeze", choices=("auto", "vision", "none"), default=d.freeze,
                   help="auto: the vision tower is frozen for a pretrained backbone, trained for tiny (default auto)")
    lrs = {kind: [f"{lr:.0e}".replace("e-0", "e-") for lr in pair] for kind, pair in DEFAULT_LRS.items()}
    t.add_argument("--lr-head", type=float,
                   help=f"(default {lrs['pretrained'][0]} pretrained, {lrs['tiny'][0]} tiny)")
    t.add_argument("--lr-backbone", type=float,
                   help=f"scaled by sqrt(batch/16) (default {lrs['pretrained'][1]} pretrained, {lrs['tiny'][1]} tiny)")
    t.add_argument("--evals", type=int, default=d.evals, help="evaluations during the run (default %(default)s)")
    t.add_argument("--select-by", choices=("nll", "play"), default=d.select_by, help="keep OUT/best by validation "
                   "NLL or by a short play check in laya-eval (default %(default)s)")
    t.add_argument("--calibrate-on", type=_names, help="games whose val split fits the temperature (default: the "
                   "training games' own held-out val episodes; ECE is reported on episodes the fit did not use)")
    t.add_argument("--seed", type=int, default=d.seed, help="(default %(default)s)")
    t.add_argument("--device", default=d.device, help="torch device, e.g. cuda (default %(default)s)")
    t.add_argument("--restart", action="store_true", help="start over instead of resuming OUT/state.pt")
    t.add_argument("--crash-at-step", type=int, help="raise once at this step (to exercise resuming)")

    g = sub.add_parser("dagger", help="play a checkpoint, label what it saw with the expert, write source daggerN",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="One DAgger round: the checkpoint plays (sampling from its probabilities, two "
                       "frames), the expert labels every visited decision, and the records go to ROOT/dagger<N>/. "
                       "Then continue training on both sources.", epilog="the loop:\n"
                       "  laya-policy dagger --model runs/tiny/final --root data/atari --games Pong,Freeway --round 1\n"
                       "  laya-policy train --data data/atari --sources expert2f,dagger1 --balance game_source \\\n"
                       "      --init-from runs/tiny/final --out runs/tiny-d1")
    g.add_argument("--model", required=True, help="checkpoint directory")
    g.add_argument("--root", required=True, help="atari-data layout root to write into")
    g.add_argument("--games", type=_names, required=True, help="comma-separated games")
    g.add_argument("--round", type=int, required=True, help="round number N (source dagger<N>)")
    g.add_argument("--expert", default="builtin", help="builtin, sb3:PATH, cleanrl:PATH or hub:REPO (default builtin)")
    g.add_argument("--train-frames", type=int, default=3_000, help="(default %(default)s)")
    g.add_argument("--val-frames", type=int, default=150, help="(default %(default)s)")
    g.add_argument("--decision-cap", type=int, default=EVAL_DECISION_CAP, help="(default %(default)s)")
    g.add_argument("--greedy", action="store_true", help="play the top action instead of sampling")
    g.add_argument("--seed", type=int, default=0, help="(default %(default)s)")
    g.add_argument("--device", default="cpu", help="(default %(default)s)")
    g.add_argument("--force", action="store_true", help="rewrite games already written")

    pu = sub.add_parser("push", help="upload a checkpoint to the Hub with a generated model card",
                        formatter_class=argparse.RawDescriptionHelpFormatter,
                        description="Upload CKPT to the model repo --repo with a README.md model card: the base "
                        "model, the data and settings it was trained with (its training.json), the evaluation table "
                        "of a laya-eval results file, the license. Anyone then plays it with "
                        "`laya-eval run --policy laya:ORG/NAME`.", epilog="examples:\n"
                        "  laya-policy push runs/tiny/final --repo me/laya-tiny-pong --results runs/tiny/eval.json\n"
                        "  laya-policy push runs/tiny/final --repo me/laya-tiny-pong --dry-run staged/  # look first")
    pu.add_argument("checkpoint", metavar="CKPT", help="checkpoint folder (or ORG/NAME[@REVISION])")
    pu.add_argument("--repo", required=True, help="model repo id, ORG/NAME")
    pu.add_argument("--results", help="a laya-eval results file for the card's evaluation table")
    pu.add_argument("--license", default="apache-2.0", help="(default %(default)s, SmolVLM's)")
    pu.add_argument("--private", action="store_true", help="create the repo private")
    pu.add_argument("--revision", help="branch to push to (default main)")
    pu.add_argument("--dry-run", metavar="DIR", help="write the folder that would be uploaded to DIR and stop")

    from laya_policy.quickstart import QuickstartConfig

    q = QuickstartConfig()
    k = sub.add_parser("quickstart", help="the whole pipeline on built-in defaults: data, training, evaluation, report",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Generate expert2f data with the built-in experts, validate it, pack it, load it "
                       "back through datasets.load_dataset, train the policy, evaluate it in laya-eval against random "
                       "and the expert, and write OUT/report.md (data stats, training curve, evaluation table and "
                       "plots, a video). About 20 minutes on two CPU cores, no downloads. A rerun skips finished "
                       "stages and resumes an interrupted one.", epilog="examples:\n"
                       "  laya-policy quickstart\n"
                       "  laya-policy quickstart --games Pong,Breakout,Freeway,Boxing,SpaceInvaders --minutes 60 "
                       "--train-frames 20000 --device cuda --out runs/bigger")
    k.add_argument("--out", default=q.out, help="(default %(default)s)")
    k.add_argument("--games", type=_names, default=q.games, help="comma-separated (default %(default)s)")
    k.add_argument("--train-frames", type=int, default=q.train_frames, help="per game (default %(default)s)")
    k.add_argument("--val-frames", type=int, default=q.val_frames, help="per game (default %(default)s)")
    k.add_argument("--minutes", type=float, default=q.minutes, help="training budget (default %(default)s)")
    k.add_argument("--model", default=q.model, help="tiny, a Hub id or a local directory (default %(default)s)")
    k.add_argument("--image-size", type=int, default=q.image_size, help="(default: the backbone's; 128 for tiny)")
    k.add_argument("--batch", type=int, default=q.batch, help="(default %(default)s)")
    k.add_argument("--episodes", type=int, default=q.episodes, help="evaluation episodes per game "
                   "(default %(default)s)")
    k.add_argument("--cap", type=int, default=q.cap, help="evaluation decisions per episode at most "
                   "(default %(default)s, the protocol's)")
    k.add_argument("--decision-cap", type=int, default=q.decision_cap, help="decisions per generated episode "
                   "(default %(default)s)")
    k.add_argument("--baseline-episodes", type=int, default=q.baseline_episodes, help="expert and random episodes "
                   "measured into meta.json (default %(default)s)")
    k.add_argument("--video-decisions", type=int, default=q.video_decisions, help="(default %(default)s)")
    k.add_argument("--device", default=q.device, help="(default %(default)s)")
    k.add_argument("--workers", type=int, default=q.workers, help="generation processes (default %(default)s)")
    k.add_argument("--seed", type=int, default=q.seed, help="(default %(default)s)")
    k.add_argument("--restart", action="store_true", help="delete OUT and start over")
    return p


def _quiet_library_bars() -> None:
    """transformers and datasets draw their progress bars even into logs; ours follow the terminal."""
    if not sys.stderr.isatty():
        import datasets
        import transformers

        datasets.disable_progress_bars()
        transformers.utils.logging.disable_progress_bar()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _quiet_library_bars()
        if args.command == "play":
            from laya_policy.play import LayaPolicy
            from laya_policy.video import record_episode

            policy = LayaPolicy(args.model, device=args.device, cuda_graph=args.cuda_graph)
            summary = record_episode(policy, args.game, args.video,
                                     seed=args.seed, max_decisions=args.max_decisions, greedy=not args.sample)
            print(f"{summary['game']}: {summary['decisions']} decisions, score {summary['score']:g} "
                  f"-> {summary['video']}")
        if args.command == "train":
            from laya_policy.train import TrainConfig, train

            keys = set(TrainConfig.__dataclass_fields__) & set(vars(args))
            cfg = TrainConfig(**{k: getattr(args, k) for k in keys})
            summary = train(cfg)
            if summary:  # other ranks of a distributed run return nothing
                print(f"{summary['steps']} steps in {summary['minutes']:.1f} min ({summary['samples_per_s']} "
                      f"samples/s); best {summary['best']}; checkpoint {args.out}/final")
        if args.command == "dagger":
            from atari_data.dagger import DaggerConfig, write_dagger_round
            from laya_policy.play import LayaPolicy

            policy = LayaPolicy(args.model, device=args.device)
            cfg = DaggerConfig(root=args.root, round=args.round, games=args.games, expert=args.expert,
                               train_frames=args.train_frames, val_frames=args.val_frames,
                               decision_cap=args.decision_cap, greedy=args.greedy, seed=args.seed, force=args.force)
            for game, meta in write_dagger_round(cfg, policy.frames_policy()).items():
                if meta is None:
                    print(f"{game}: already written (--force to redo)")
                else:
                    print(f"{game}: {meta['train']['records']} train / {meta['val']['records']} val records -> "
                          f"{args.root}/dagger{args.round}/{game}")
        if args.command == "push":
            from pathlib import Path

            from laya_policy.push import push, stage

            if args.dry_run:
                folder = stage(args.checkpoint, args.repo, Path(args.dry_run), args.results, args.license)
                print(f"staged {sum(1 for p in folder.rglob('*') if p.is_file())} files in {folder}; nothing uploaded")
            else:
                print(push(args.checkpoint, args.repo, args.results, args.private, args.revision, args.license))
        if args.command == "quickstart":
            from laya_policy.quickstart import Quickstart, QuickstartConfig

            keys = set(QuickstartConfig.__dataclass_fields__) & set(vars(args))
            Quickstart(QuickstartConfig(**{k: getattr(args, k) for k in keys})).run()
            print(f"report: {args.out}/report.md")
        return 0
    except KeyboardInterrupt:
        print("interrupted: run the same command again to resume", file=sys.stderr)
        return 130
    except (OSError, ValueError, AtariDataError, EvalError) as e:
        print(f"error: {e.render() if isinstance(e, (AtariDataError, EvalError)) else e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
