"""`laya-policy`: train the Laya Vision policy, play it, and run DAgger rounds."""

from __future__ import annotations

import argparse
import signal
import sys

from atari_data.publish.teardown import release_arrow_threads
from laya_policy.errors import EXPECTED, GroupFailed, said
from laya_policy.settings import QuickstartConfig, TrainConfig, check_push
from laya_policy.video import DECISIONS, MAX_DECISIONS
from laya_protocol.bars import quiet_library_bars
from laya_protocol.config import add_options, add_version, from_args
from laya_protocol.errors import os_error_exit, stopped, terminations_raised
from laya_protocol.seeds import EVAL_SEED_BASE


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="laya-policy",
        description="Laya Vision: a small vision-language policy "
        "that plays games from the screen. Evaluate checkpoints with "
        "`laya-eval run --policy laya:CKPT`.",
    )
    add_version(p, "laya-policy")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pl = sub.add_parser(
        "play",
        help="record a checkpoint playing one episode as a .gif or .mp4 (headless)",
        description="Play one episode with the checkpoint (two-frame rule, auto-FIRE, sticky actions) "
        "and write a video with the chosen action and its probability drawn on each frame.",
    )
    pl.add_argument("--model", required=True, help="checkpoint directory")
    pl.add_argument("--game", required=True, help="ALE v5 game name, e.g. Pong")
    pl.add_argument("--video", required=True, help="output .gif or .mp4")
    pl.add_argument(
        "--max-decisions",
        type=int,
        default=DECISIONS,
        help=f"decisions recorded at most: {', '.join(f'{n:,} for a {k}' for k, n in MAX_DECISIONS.items())} "
        "(default %(default)s)",
    )
    pl.add_argument(
        "--seed",
        type=int,
        default=EVAL_SEED_BASE,
        help="the episode's ALE seed (default %(default)s, laya-eval's first)",
    )
    pl.add_argument("--sample", action="store_true", help="draw actions from the probabilities instead of the top one")
    pl.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    pl.add_argument(
        "--cuda-graph",
        action="store_true",
        help="replay the language model and head as one CUDA graph "
        "per batch shape (needs --device cuda; same answers, less launch overhead)",
    )
    t = sub.add_parser(
        "train",
        help="train the policy on atari-data records (durable: rerun to resume)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train on atari-data records, balanced over games or (game, source), with soft "
        "targets; evaluations go to OUT/log.jsonl and print as a table, the selected checkpoint to "
        "OUT/best, state to OUT/state.pt (rerun the same command to resume), a calibrated checkpoint "
        "to OUT/final.",
        epilog="examples:\n"
        "  laya-policy train --data data/atari --games Pong,Freeway --max-minutes 15 --out runs/tiny\n"
        "  laya-policy train --data out/packed --sources expert2f --out runs/packed\n"
        "  torchrun --nproc-per-node 2 -m laya_policy.cli train --data data/atari --out runs/ddp",
    )
    add_options(t, TrainConfig)

    g = sub.add_parser(
        "dagger",
        help="play a checkpoint, label what it saw with the expert, write source daggerN",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="One DAgger round: the checkpoint plays (sampling from its probabilities, two "
        "frames), the expert labels every visited decision, and the records go to ROOT/dagger<N>/. "
        "Then continue training on both sources.",
        epilog="the loop:\n"
        "  laya-policy dagger --model runs/tiny/final --root data/atari --games Pong,Freeway --round 1\n"
        "  laya-policy train --data data/atari --sources expert2f,dagger1 --balance game_source \\\n"
        "      --init-from runs/tiny/final --out runs/tiny-d1",
    )
    g.add_argument("--model", required=True, help="checkpoint directory")
    g.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    from atari_data.produce.dagger import DaggerConfig

    add_options(g, DaggerConfig)

    pu = sub.add_parser(
        "push",
        help="upload a checkpoint to the Hub with a generated model card",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Upload CKPT to the model repo --repo with a README.md model card: the base "
        "model, the data and settings it was trained with (its training.json), the evaluation table "
        "of a laya-eval results file, the license. Anyone then plays it with "
        "`laya-eval run --policy laya:ORG/NAME`.",
        epilog="examples:\n"
        "  laya-policy push runs/tiny/final --repo me/laya-tiny-pong --results runs/tiny/eval.json\n"
        "  laya-policy push runs/tiny/final --repo me/laya-tiny-pong --dry-run staged/  # look first",
    )
    pu.add_argument("checkpoint", metavar="CKPT", help="checkpoint folder (or ORG/NAME[@REVISION])")
    pu.add_argument("--repo", required=True, help="model repo id, ORG/NAME")
    pu.add_argument("--results", help="a laya-eval results file for the card's evaluation table")
    pu.add_argument("--license", default="apache-2.0", help="(default %(default)s, SmolVLM's)")
    pu.add_argument("--private", action="store_true", help="create the repo private")
    pu.add_argument("--revision", help="branch to push to (default main)")
    pu.add_argument("--dry-run", metavar="DIR", help="write the folder that would be uploaded to DIR and stop")

    k = sub.add_parser(
        "quickstart",
        help="the whole pipeline on built-in defaults: data, training, evaluation, report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Generate expert2f data with the built-in experts, validate it, pack it, load it "
        "back through datasets.load_dataset, train the policy, evaluate it in laya-eval against random "
        "and the expert, and write OUT/report.md (data stats, training curve, evaluation table and "
        "plots, a video). 10-25 minutes on two CPU cores, no downloads. A rerun skips finished "
        "stages and resumes an interrupted one.",
        epilog="examples:\n"
        "  laya-policy quickstart\n"
        "  laya-policy quickstart --games Pong,Breakout --minutes 60 --train-frames 20000 --device cuda "
        "--out runs/bigger",
    )
    add_options(k, QuickstartConfig)
    return p


@terminations_raised()
def main(argv: list[str] | None = None) -> int:
    ctrl_c = None  # SIGINT's handler, while the way out ignores a second Ctrl-C
    args = None
    try:
        args = build_parser().parse_args(argv)
        quiet_library_bars()
        if args.command == "play":
            from laya_policy.video import check_video, record_episode

            check_video(args.game, args.video, args.seed, args.max_decisions)  # before torch and the checkpoint load
            from laya_policy.play import LayaPolicy

            policy = LayaPolicy(args.model, device=args.device, cuda_graph=args.cuda_graph)
            summary = record_episode(
                policy, args.game, args.video, seed=args.seed, max_decisions=args.max_decisions, greedy=not args.sample
            )
            print(
                f"{summary['game']}: {summary['decisions']} decisions, score {summary['score']:g} -> {summary['video']}"
            )
        if args.command == "train":
            cfg = from_args(TrainConfig, args)
            cfg.check()  # a value no run takes: refused before torch loads
            from laya_policy.checkpoint import FINAL
            from laya_policy.train import train

            summary = train(cfg)
            if summary:  # other ranks of a distributed run return nothing
                rate = summary["samples_per_s"]  # 0 where this command trained no step: the run was finished
                print(
                    f"{summary['steps']} steps in {summary['minutes']:.1f} min "
                    + (f"({rate} samples/s)" if rate else "(all trained before this command)")
                    + f"; best {summary['best']}; checkpoint {args.out}/{FINAL}"
                )
        if args.command == "dagger":
            from pathlib import Path

            from atari_data.errors import AtariDataError
            from atari_data.produce.dagger import DaggerConfig, write_dagger_round
            from laya_policy.play import LayaPolicy

            cfg = from_args(DaggerConfig, args)  # refused before the checkpoint loads
            model = Path(args.model)
            if model.is_dir() and model.resolve() in (root := Path(cfg.root).resolve(), *root.parents):
                raise AtariDataError(
                    f"{cfg.root} is inside the checkpoint {args.model}: write the round elsewhere", field="--root"
                )
            policy = LayaPolicy(args.model, device=args.device)
            learner = f"checkpoint {str(policy.identity['fingerprint'])[:12]}"  # however its path is spelled
            for game, meta in write_dagger_round(cfg, policy.frames_policy(), learner).items():
                if meta is None:
                    print(f"{game}: already written (--force to redo)")
                else:
                    print(
                        f"{game}: {meta['train']['records']} train / {meta['val']['records']} val records -> "
                        f"{args.root}/dagger{args.round}/{game}"
                    )
        if args.command == "push":
            from pathlib import Path

            check_push(args.repo, args.revision, args.license)  # refused before torch loads
            from laya_policy.push import push, stage

            if args.dry_run:
                folder = stage(
                    args.checkpoint, args.repo, Path(args.dry_run), args.results, args.license, args.revision
                )
                print(f"staged {sum(1 for p in folder.rglob('*') if p.is_file())} files in {folder}; nothing uploaded")
            else:
                print(push(args.checkpoint, args.repo, args.results, args.private, args.revision, args.license))
        if args.command == "quickstart":
            from laya_policy.quickstart import Quickstart

            quickstart = Quickstart(from_args(QuickstartConfig, args))
            quickstart.run()
            print(f"report: {quickstart.out / 'report.md'}")
        return 0
    except KeyboardInterrupt as e:
        # uv passes a terminal's Ctrl-C on a second time: it must not cut the way out short. A caller
        # from Python (argv given: a notebook, a script) gets Ctrl-C back when this returns.
        ctrl_c = signal.signal(signal.SIGINT, signal.SIG_IGN)
        if ctrl_c is None:  # set outside Python: Python's own is the nearest
            ctrl_c = signal.default_int_handler
        how, code = stopped(e)
        again = "start" if getattr(args, "command", None) == "play" else "resume"  # a video is played anew
        print(f"{how}: run the same command again to {again}", file=sys.stderr)
        return code
    except OSError as e:
        return os_error_exit(e)
    except EXPECTED as e:
        print(f"error: {said(e)}", file=sys.stderr)
        return 2
    except GroupFailed as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        release_arrow_threads()
        if argv is not None and ctrl_c is not None:
            signal.signal(signal.SIGINT, ctrl_c)


if __name__ == "__main__":
    sys.exit(main())
