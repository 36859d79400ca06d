"""Device-side preprocessing against SmolVLM's PIL processor, on this machine's CPU.

ms per frame of `ImagePrep(mode="gpu")` (the two-hop LANCZOS resize composed into two matmuls)
at batch 1 and 8 as play calls it (``prep(frames)``) and 32 and 512 as training's screen cache does
with screens it has not kept (``prep.normalise(prep.resize(frames))``), with torch's threads set as training sets them
(`laya_policy.distributed.set_threads`: one per CPU process; `--threads` to change), against
`ImagePrep(mode="processor")` (Idefics3ImageProcessorPil, which loops
over frames, so its per-frame cost does not depend on the batch; measured on --processor-frames),
in one run, each the best of --repeats rounds that time every path and batch once (``_timing.in_rounds``:
alternating order, after an untimed call of each; until 2026-12-06 the processor was timed once, cold);
and the fidelity of the device-side path against the processor per game.

    uv run python tools/bench/preprocess.py [--size 512] [--processor-frames 16] [--threads 1] [--repeats 3]

Goal: the device-side path at least 25x faster than the processor.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from _timing import in_rounds

from atari_data.play.ale import AtariGame, play_episode
from laya_policy.distributed import set_threads
from laya_policy.imageprep import ImagePrep

GAMES = ["Pong", "Breakout", "MsPacman", "Boxing", "Freeway", "SpaceInvaders"]


def frames_of(game: str, n: int) -> np.ndarray:
    g = AtariGame(game)
    rng = np.random.default_rng(0)
    out = [d.frame.copy() for d, _ in play_episode(g, 1, lambda d: int(rng.integers(len(g.actions))), n)]
    return np.stack(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--processor-frames", type=int, default=16)
    ap.add_argument("--threads", type=int, help="torch intra-op threads (default: as training sets them, 1)")
    ap.add_argument("--repeats", type=int, default=3, help="timed rounds, each path and batch once a round (default 3)")
    ap.add_argument(
        "--smoke", action="store_true", help="128 px, 2 processor frames: checks the bench runs (the tests run it)"
    )
    args = ap.parse_args(argv)
    per_game = 86  # 516 real screens
    if args.smoke:
        args.size, args.processor_frames, per_game, args.repeats = 128, 2, 8, 1
    set_threads(args.threads, "cpu")
    pool = np.concatenate([frames_of(g, per_game) for g in GAMES])
    gpu, proc = ImagePrep(args.size, "gpu"), ImagePrep(args.size, "processor")
    exact = ImagePrep(args.size, "gpu", "lanczos2-exact")

    def training(x):  # what training's screen cache does with screens it has not kept yet
        return gpu.normalise(gpu.resize(x))

    batches = {  # side: (path, frames); the processor loops over frames, so a few measure its rate
        "gpu 1": (gpu, pool[:1]),
        "gpu 8": (gpu, pool[:8]),
        "gpu 32": (training, pool[:32]),
        "gpu 512": (training, pool[:512]),
        "processor": (proc, pool[: args.processor_frames]),
        "exact 8": (exact, pool[: 2 if args.smoke else 8]),
    }
    with torch.inference_mode():
        seconds, _ = in_rounds({k: lambda f=f, x=x: f(x) for k, (f, x) in batches.items()}, args.repeats)
    t1, t8, t32, t512, tp, te = (1000 * min(seconds[k]) / len(x) for k, (_, x) in batches.items())
    print(
        f"size {args.size}, CPU threads {torch.get_num_threads()}; best of {args.repeats} rounds, each path and batch "
        "once a round, after an untimed call of each"
    )
    print("| path | batch | ms/frame | speed-up vs processor | goal |\n| --- | ---: | ---: | ---: | ---: |")
    print(f"| processor (PIL) | any | {tp:.2f} | 1.0x | |")
    print(f"| device-side, play's call | 1 | {t1:.2f} | {tp / t1:.1f}x | (play) |")
    print(f"| device-side, play's call | 8 | {t8:.2f} | {tp / t8:.1f}x | (play) |")
    print(f"| device-side, training's resize + normalise | 32 | {t32:.2f} | {tp / t32:.1f}x | >= 25x |")
    print(
        f"| device-side, training's resize + normalise | {len(pool[:512])} | {t512:.2f} | {tp / t512:.1f}x | >= 25x |"
    )
    print(f"| device-side, lanczos2-exact | 8 | {te:.2f} | {tp / te:.1f}x | (exact; for GPUs) |")
    print("\n| game | mean abs diff (grey levels) | p99.9 | max | exact: mean | exact: max |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for i, game in enumerate(GAMES):
        f = pool[i * per_game : i * per_game + (1 if args.smoke else 8)]
        ref = proc(f)
        d = np.round((gpu(f) - ref).abs().numpy() * 127.5, 3)
        e = np.round((exact(f) - ref).abs().numpy() * 127.5, 3)
        print(
            f"| {game} | {d.mean():.3f} | {np.quantile(d, 0.999):.0f} | {d.max():.0f} | {e.mean():.4f} "
            f"| {e.max():.0f} |"
        )


if __name__ == "__main__":
    main()
