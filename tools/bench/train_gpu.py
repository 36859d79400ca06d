"""Training steps/s of a SmolVLM-256M-sized policy on a CUDA GPU, against the GPU's own limit
measured in the same run. Needs a GPU; downloads nothing.

Random weights in SmolVLM-256M's shapes (``random-smolvlm``), batch 32, two frames at 512,
device-side preprocessing, bf16 autocast, the vision tower frozen (as for the real backbone), on a
small expert2f layout generated here.

The step rate leaves out warm-up (CUDA's kernels loaded and tuned on the first steps): after one
untimed run of ``--warmup`` steps (what a process does once), the same training is run for
``--warmup`` steps and for ``--warmup`` + ``--steps``, and the rate is ``--steps`` over the
difference of their step times. Each run starts with an empty screen cache, so the timed steps
resize the screens they meet first, as a run's first pass over its data does (on the prefetch
thread, beside the step). The physical limit: one
step's floating-point work (forward and backward, torch's FLOP counter on the device; the
optimiser's few are not counted) against the rate at which the GPU multiplies two large bf16
matrices, timed here. The reference's 2.78 steps/s on an A100 (full 8-game two-frame runs, 22
loader workers) is printed for scale only: it was measured elsewhere, on other data.

    uv run python tools/bench/train_gpu.py [--steps 60] [--warmup 10]
    uv run python tools/bench/train_gpu.py --smoke   # on the CPU, the tiny preset, a few steps: checks it runs
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from dataclasses import replace

import torch
from train import step_flops  # the training bench's FLOP count, beside this script

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_policy.settings import TrainConfig
from laya_policy.train import train

REFERENCE_A100_STEPS_S = 2.78


def matmul_rate(device: str, side: int, repeats: int) -> float:
    """FLOP/s of ``device`` multiplying two ``side`` x ``side`` matrices (bf16 on a GPU, float32 on
    the CPU), the best of ``repeats`` after one untimed product."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.randn(side, side, device=device, dtype=dtype)
    b = torch.randn(side, side, device=device, dtype=dtype)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    a @ b
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        sync()
        best = min(best, time.perf_counter() - start)
    return 2 * side**3 / best


def step_seconds(cfg: TrainConfig) -> tuple[float, float]:
    """(seconds spent in steps, data-wait share) of one fresh training run of ``cfg``."""
    with contextlib.redirect_stdout(io.StringIO()):
        s = train(replace(cfg, restart=True), progress=False)
    return s["steps"] * cfg.batch / s["samples_per_s"], s["data_wait_share"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="timed steps, past the warm-up")
    ap.add_argument("--warmup", type=int, default=10, help="steps run before the timed ones, and not timed")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny preset at 64 px, batch 4, 2 + 1 steps")
    args = ap.parse_args(argv)
    model, size, batch, device, records, side = "random-smolvlm", 512, 32, "cuda", 400, 8192
    if args.smoke:
        model, size, batch, device, records, side, args.steps, args.warmup = "tiny", 64, 4, "cpu", 40, 256, 2, 1
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
            steps=args.warmup,
            evals=1,
            eval_records=batch,
            device=device,
            lr_head=1e-4,
            lr_backbone=2e-5,
            max_minutes=30,
        )
        step_seconds(cfg)  # what a process does once (CUDA's context, kernels loaded) falls here, untimed
        warm, _ = step_seconds(cfg)
        whole, wait = step_seconds(replace(cfg, steps=args.warmup + args.steps))
        flops = step_flops(replace(cfg, out=f"{tmp}/flops", steps=3))
    if whole <= warm:  # the rate is the difference of two runs: a drift that reverses it is no rate
        raise SystemExit(f"the longer run ({whole:.2f} s) took no longer than the warm-up alone ({warm:.2f} s)")
    steps_s = args.steps / (whole - warm)
    rate = matmul_rate(device, side, 3 if args.smoke else 20)
    limit = rate / flops
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke)"
    print(f"{name}, {model}, batch {batch}, two frames, {size}, device-side{', bf16' if device == 'cuda' else ''}")
    print(
        f"physical limit: a step is {flops / 1e12:.3f} TFLOP (forward and backward); this device multiplies "
        f"{side}x{side} {'bf16' if device == 'cuda' else 'float32'} matrices at {rate / 1e12:.1f} TFLOP/s, "
        f"so it would train {limit:.2f} steps/s"
    )
    print("| what | steps/s | data wait (all steps) | of the limit |\n| --- | ---: | ---: | ---: |")
    print(
        f"| this device, {args.steps} steps past {args.warmup} of warm-up | {steps_s:.2f} | {wait:.1%} | "
        f"{steps_s / limit:.2f}x |"
    )
    print(f"| reference A100, measured elsewhere (for scale, not compared) | {REFERENCE_A100_STEPS_S} | | |")


if __name__ == "__main__":
    main()
