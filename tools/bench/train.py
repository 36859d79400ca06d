"""Training throughput of the tiny preset, and how much of each step waits for data.

Trains the ``tiny`` policy for a fixed number of steps with one and with two frames on a layout
(by default a small expert2f layout generated here for Pong and Breakout) and reports samples/s
and the data-wait share: the time a step spends waiting for its frames (decoded by a background
thread during the previous step) over the whole step time, both measured in the same run.

    uv run python tools/bench/train.py [--data ROOT] [--steps 60] [--batch 16] [--image-size 128]

Goal: data wait under 10% of step time on a two-core CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile

import torch

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_policy.train import TrainConfig, train


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="layout root or packed repository (default: generate a small one)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=128)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = f"{tmp}/data"
            for game in ("Pong", "Breakout"):
                generate_game(
                    GenerateConfig(
                        root=data,
                        train_frames=300,
                        val_frames=20,
                        min_train_episodes=1,
                        decision_cap=400,
                        baseline_episodes=0,
                    ),
                    game,
                )
        rows = []
        for frames in (1, 2):
            cfg = TrainConfig(
                data=data,
                out=f"{tmp}/run{frames}",
                frames=frames,
                steps=args.steps,
                batch=args.batch,
                image_size=args.image_size,
                evals=1,
                eval_records=16,
                max_minutes=60,
            )
            with contextlib.redirect_stdout(io.StringIO()):
                s = train(cfg, progress=False)
            rows.append((frames, s["samples_per_s"], s["data_wait_share"]))
    print(
        f"tiny preset, {args.image_size}px, batch {args.batch}, {args.steps} steps, {torch.get_num_threads()} threads"
    )
    print("| frames | samples/s | data wait / step time | goal |\n| ---: | ---: | ---: | ---: |")
    for frames, rate, wait in rows:
        print(f"| {frames} | {rate:.1f} | {wait:.1%} | < 10% |")


if __name__ == "__main__":
    main()
