"""Training steps/s of a SmolVLM-256M-sized policy on a CUDA GPU. Needs a GPU; downloads nothing.

Random weights in SmolVLM-256M's shapes (``random-smolvlm``), batch 32, two frames at 512,
device-side preprocessing, bf16 autocast, the vision tower frozen (as for the real backbone), on a
small expert2f layout generated here. Prints steps/s and the data-wait share against the
reference's 2.78 steps/s on an A100 (full 8-game two-frame runs, 22 loader workers).

    uv run python tools/bench/train_gpu.py [--steps 60]
    uv run python tools/bench/train_gpu.py --smoke   # on the CPU, the tiny preset, 2 steps: checks it runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile

import torch

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_policy.train import TrainConfig, train

REFERENCE_A100_STEPS_S = 2.78


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny preset at 64 px, batch 4, 2 steps")
    args = ap.parse_args(argv)
    model, size, batch, device, records = "random-smolvlm", 512, 32, "cuda", 400
    if args.smoke:
        model, size, batch, device, records, args.steps = "tiny", 64, 4, "cpu", 40, 2
    elif not torch.cuda.is_available():
        raise SystemExit("train_gpu.py needs a CUDA GPU (none found); the CPU figures come from tools/bench/train.py")
    with tempfile.TemporaryDirectory() as tmp:
        for game in ("Pong", "Breakout"):
            generate_game(
                GenerateConfig(
                    root=tmp,
                    train_frames=records,
                    val_frames=20,
                    min_train_episodes=1,
                    decision_cap=500,
                    baseline_episodes=0,
                ),
                game,
            )
        cfg = TrainConfig(
            data=tmp,
            out=f"{tmp}/run",
            model=model,
            freeze="vision",
            image_size=size,
            batch=batch,
            frames=2,
            preprocess="gpu",
            steps=args.steps,
            evals=1,
            eval_records=batch,
            device=device,
            lr_head=1e-4,
            lr_backbone=2e-5,
            max_minutes=30,
        )
        with contextlib.redirect_stdout(io.StringIO()):
            s = train(cfg, progress=False)
    steps_s = s["samples_per_s"] / batch
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke)"
    print(f"{name}, {model}, batch {batch}, two frames, {size}, device-side{', bf16' if device == 'cuda' else ''}")
    print("| what | steps/s | data wait | ratio to reference |\n| --- | ---: | ---: | ---: |")
    print(f"| this GPU | {steps_s:.2f} | {s['data_wait_share']:.1%} | {steps_s / REFERENCE_A100_STEPS_S:.2f}x |")
    print(f"| reference A100 | {REFERENCE_A100_STEPS_S} | | 1.00x |")


if __name__ == "__main__":
    main()
