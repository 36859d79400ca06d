"""Two-frame play on a CUDA GPU: the processor path against the device-side path, with the cache
and with the CUDA graph. Needs a GPU; downloads nothing.

A policy with SmolVLM-256M's shapes and random weights (``random-smolvlm``) plays Breakout through
laya-eval (8 episodes in lockstep, sampled actions, two frames at 512) four ways:

1. 512 through SmolVLM's processor (Pillow on the CPU), no cache
2. 512 device-side (the composed resize on the GPU), no cache
3. device-side with the FrameFeatureCache
4. device-side with the cache and the language model + head replayed as a CUDA graph

It prints decisions/s, the ratio to row 1, the reference's L4 figures (17.3 / 49.1 / 53.1
decisions/s for rows 1-3) and whether the graph gives the same probabilities as eager play.

    uv run python tools/bench/play_gpu.py [--decisions 150] [--episodes 8]
    uv run python tools/bench/play_gpu.py --smoke    # on the CPU, the tiny preset at 64 px, no CUDA graph:
                                                     # checks the script runs (the tests run it)
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch

from laya_eval.runner import play
from laya_policy.backbone import build_backbone
from laya_policy.checkpoint import AgentConfig, save_checkpoint
from laya_policy.model import ChoicePolicy
from laya_policy.play import LayaPolicy
from laya_protocol.games import action_set
from laya_protocol.protocol import Protocol
from laya_protocol.seeds import EVAL_SEED_BASE

REFERENCE_L4 = {"processor": 17.3, "device-side": 49.1, "device-side + cache": 53.1}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--decisions", type=int, default=150)
    ap.add_argument("--episodes", type=int, default=8)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny preset, 64 px, 4 decisions, no CUDA graph")
    args = ap.parse_args(argv)
    model, size, device = "random-smolvlm", 512, "cuda"
    if args.smoke:
        model, size, device, args.decisions, args.episodes = "tiny", 64, "cpu", 4, 2
    elif not torch.cuda.is_available():
        raise SystemExit("play_gpu.py needs a CUDA GPU (none found); the CPU figures come from tools/bench/play.py")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    proto = Protocol.ale_v5("Breakout", decision_cap=args.decisions)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for preprocess in ("processor", "gpu"):
            backbone, tok = build_backbone(model, image_size=size, seed=0)
            save_checkpoint(
                ChoicePolicy(backbone, tok),
                AgentConfig(image_size=size, preprocess=preprocess, frames=2, backbone=model),
                f"{tmp}/{preprocess}",
            )
        runs = [
            ("processor", "processor", False, False),
            ("device-side", "gpu", False, False),
            ("device-side + cache", "gpu", True, False),
            ("device-side + cache + CUDA graph", "gpu", True, True),
        ]
        for name, path, cache, graph in runs[: 3 if args.smoke else 4]:  # CUDA graphs need CUDA
            policy = LayaPolicy(f"{tmp}/{path}", device=device, cache=cache, cuda_graph=graph)
            play(policy, "Breakout", Protocol.ale_v5("Breakout", decision_cap=2 if args.smoke else 10), 2, 0)  # warm-up
            warm_every_batch_size(policy, proto, args.episodes)
            sync()
            t = time.perf_counter()
            ep = play(policy, "Breakout", proto, args.episodes, EVAL_SEED_BASE, greedy=False)
            sync()
            rows.append((name, sum(ep.steps) / (time.perf_counter() - t)))
        same = "not run (smoke, on the CPU)" if args.smoke else graph_matches_eager(f"{tmp}/gpu")
    base = rows[0][1]
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU (smoke)"
    print(f"{name}, Breakout, {args.episodes} episodes x {args.decisions} decisions, two frames, {size}, {model}")
    print("| path | decisions/s | vs processor | reference L4 decisions/s (measured elsewhere, for scale) |")
    print("| --- | ---: | ---: | ---: |")
    for name, rate in rows:
        print(f"| {name} | {rate:.1f} | {rate / base:.2f}x | {REFERENCE_L4.get(name, '')} |")
    print(f"CUDA graph probabilities equal eager ones (atol 1e-4): {same}")


def warm_every_batch_size(policy: LayaPolicy, proto: Protocol, episodes: int) -> None:
    """Run ``policy`` once at every batch size the timed play can meet (episodes end one by one,
    so each size from ``episodes`` down to 1), so no CUDA graph is captured and no kernel first
    loaded inside the timed play; then empty the frame cache, so its hit rate is play's own. The
    question is play's, so play keeps what was captured here."""
    policy.reset("Breakout", action_set("Breakout", proto.action_set))
    frames = np.random.default_rng(1).integers(0, 256, (episodes, 210, 160, 3), dtype=np.uint8)
    for n in range(1, episodes + 1):
        policy.probabilities(frames[:n], frames[:n])
    if policy.cache is not None:
        policy.cache.clear()


def graph_matches_eager(ckpt: str) -> bool:
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (8, 210, 160, 3), dtype=np.uint8)
    prev = rng.integers(0, 256, (8, 210, 160, 3), dtype=np.uint8)
    out = []
    for graph in (False, True):
        policy = LayaPolicy(ckpt, device="cuda", cuda_graph=graph)
        policy.reset("Breakout", ["NOOP", "FIRE", "RIGHT", "LEFT"])
        policy.probabilities(frames, prev)  # capture on the first call, replay on the second
        out.append(policy.probabilities(frames, prev))
    return bool(np.allclose(out[0], out[1], atol=1e-4))


if __name__ == "__main__":
    main()
