"""Training throughput of the tiny preset on a CPU, quiet and beside other busy processes.

Trains the ``tiny`` policy for a fixed number of steps on a layout (by default a small expert2f
layout of Pong and Breakout generated here) with laya-policy's thread choice and with torch's own
default (one intra-op thread per core), and as one single-thread process per core (``train
--processes``, which starts them as torchrun would; data parallel: each process keeps the batch),
first on a quiet machine and then while ``--background-load`` other torch processes (matrix
products at torch's default threads) run. Everything is measured in this one run, so the ratios
compare like with like: loaded / quiet samples/s for each thread choice, and the data-wait share
(the time a step waits for its screens, prepared by a background thread during the previous step,
over the step).

    uv run python tools/bench/train.py [--data ROOT] [--steps 60] [--background-load 1] [--smoke]

Goals on two cores: with one background process the default keeps at least 0.5x its quiet
samples/s; data wait under 10% of step time.

The physical limit, measured in the same run: one step's floating-point work (forward and
backward, torch's FLOP counter; the optimiser's few are not counted) against the rate at which one
thread multiplies two large matrices, alone and in one process a core, all timed at once. Each
quiet row says what share of that rate its steps reached, over the cores a row's threads or
processes use; a step of small matrices, norms and attention cannot reach 1.0x.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_policy.settings import TrainConfig
from laya_policy.train import SUMMARY_FILE, train

# Another job on the machine, as it usually is here: a second torch process at torch's default threads
# (a test run, another experiment). A pure-Python loop does not show the OpenMP contention this measures.
BUSY = "import torch\na = torch.randn(512, 512)\nwhile True: a @ a"


def step_flops(cfg: TrainConfig, steps: int = 3) -> float:
    """Floating-point operations of one training step of ``cfg`` on its device (forward, backward;
    the mean of ``steps``): what the physical limit is computed from. train_gpu.py counts its own
    with this function."""
    import random

    from torch.utils.flop_counter import FlopCounterMode

    from laya_policy.train import build, optimise, resolve

    s = build(resolve(cfg))
    rng = random.Random(0)
    groups = list(s.train.values())
    total = 0
    for step in range(steps):
        batch_examples = [rng.choice(rng.choice(groups)) for _ in range(cfg.batch)]
        counter = FlopCounterMode(display=False)
        with counter:
            optimise(s, batch_examples, s.screens(batch_examples), step)
        total += counter.get_total_flops()
    return total / steps


def matmul_rate(side: int, repeats: int, start_at: float | None = None) -> float:
    """FLOP/s of one thread multiplying two ``side`` x ``side`` float32 matrices, the best of
    ``repeats``; timed from the wall-clock time ``start_at`` when given, so processes time at once."""
    import time

    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(side, side), torch.randn(side, side)
        a @ b
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.time()))
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    finally:
        torch.set_num_threads(before)
    return 2 * side**3 / best


def matmul_rate_together(side: int, repeats: int, cores: int, margin: float = 15.0) -> float:
    """FLOP/s of ``cores`` processes of one thread each multiplying ``side`` x ``side`` matrices at
    once, summed: what the cores give together (two vCPUs may share a physical core, and a core's
    rate alone would then count twice)."""
    import subprocess
    import sys
    import time

    start_at = time.time() + margin  # past every process's imports: their timed products overlap
    argv = [sys.executable, __file__, "--matmul-rate", str(side), str(repeats), str(start_at)]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(cores)]
    return sum(float(p.communicate()[0].split()[-1]) for p in procs)


def measure(data: str, out: str, steps: int, batch: int, image_size: int, threads: int | None) -> dict:
    cfg = TrainConfig(
        data=data,
        out=out,
        steps=steps,
        batch=batch,
        image_size=image_size,
        evals=1,
        eval_records=8,
        max_minutes=60,
        threads=threads,
        restart=True,
    )
    with contextlib.redirect_stdout(io.StringIO()):
        return train(cfg, progress=False)


def measure_processes(data: str, out: str, steps: int, batch: int, image_size: int, processes: int) -> dict:
    """The same training as :func:`measure`, as ``processes`` data-parallel processes of one thread
    (``train --processes``, gloo): ``batch`` is each one's, so a step trains ``processes`` times the
    records. Not torchrun itself: its agent failed the run when a process that had finished its work
    aborted in gloo's C++ teardown at exit, which the processes ``train`` starts skip (see
    ``laya_policy.distributed``)."""
    cmd = [sys.executable, "-m", "laya_policy.cli", "train", "--data", data, "--out", out]
    cmd += ["--processes", str(processes), "--steps", str(steps), "--batch", str(batch)]
    cmd += ["--image-size", str(image_size), "--evals", "1", "--max-minutes", "60", "--restart"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"train --processes {processes} failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(Path(out, SUMMARY_FILE).read_text())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="layout root or packed repository (default: generate a small one)")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--image-size", type=int, default=128)
    ap.add_argument("--background-load", type=int, default=1, help="busy torch processes for the loaded runs")
    ap.add_argument("--matmul-rate", nargs=3, type=float, help=argparse.SUPPRESS)  # SIDE REPEATS START_AT: one core's
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a few steps at 64 px, the background load at the lowest priority, the --processes row started "
        "once (its loaded column repeats the quiet one): checks the bench runs, not speed",
    )
    args = ap.parse_args(argv)
    if args.matmul_rate:  # one of the processes matmul_rate_together starts
        side, repeats, start_at = args.matmul_rate
        print(matmul_rate(int(side), int(repeats), start_at))
        return
    if args.smoke:
        args.steps, args.batch, args.image_size = 3, 2, 64
    cores = len(os.sched_getaffinity(0))
    # name -> (threads, processes); each process keeps the batch, so the last trains more records a step
    choices = {
        "laya-policy default (1 thread)": (None, 1),
        f"torch default ({cores} threads)": (cores, 1),
        f"{cores} processes of 1 thread (--processes)": (1, cores),
    }
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data
        if data is None:
            data = f"{tmp}/data"
            for game in ("Pong", "Breakout"):
                generate_game(
                    GenerateConfig(
                        root=data,
                        train_frames=40 if args.smoke else 300,
                        val_frames=8 if args.smoke else 20,
                        min_train_episodes=1,
                        decision_cap=400,
                        baseline_episodes=0,
                    ),
                    game,
                )
        flops = step_flops(
            TrainConfig(data=data, out=f"{tmp}/flops", steps=3, batch=args.batch, image_size=args.image_size, threads=1)
        )
        side = 256 if args.smoke else 1024
        peak = matmul_rate(side, 3 if args.smoke else 20)
        together = matmul_rate_together(side, 3 if args.smoke else 20, cores, margin=0.0 if args.smoke else 15.0)
        rows = {}
        for loaded in (False, True):
            # In the smoke run the load only has to start and stop: at nice 19 it leaves the cores to the
            # test suite around it, which it slowed by a core for the length of the loaded runs.
            busy = f"import os\nos.nice(19)\n{BUSY}" if args.smoke else BUSY
            load = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(loaded * args.background_load)]
            try:
                for name, (threads, processes) in choices.items():
                    if loaded and args.smoke and processes > 1:  # its processes started once: the smoke's check
                        rows[name, loaded] = rows[name, False]
                        continue
                    run = (data, f"{tmp}/run", args.steps, args.batch, args.image_size)
                    one = processes == 1
                    rows[name, loaded] = measure(*run, threads) if one else measure_processes(*run, processes)
            finally:
                for p in load:
                    p.kill()
                    p.wait()
    print(
        f"tiny preset, {args.image_size}px, batch {args.batch}, {args.steps} steps, {cores} cores, "
        f"{args.background_load} background process(es) when loaded"
    )
    print(
        f"physical limit: a step of {args.batch} is {flops / 1e9:.2f} GFLOP (forward and backward); one thread "
        f"multiplies {side}x{side} matrices at {peak / 1e9:.1f} GFLOP/s alone, and {cores} such processes at once "
        f"at {together / 1e9:.1f} GFLOP/s together ({together / (cores * peak):.2f}x {cores} times one), so the "
        f"cores would train {together / flops * args.batch:.0f} samples/s"
    )
    print(
        "| threads | quiet samples/s | loaded samples/s | loaded / quiet | data wait (quiet) "
        "| of the limit (quiet) | goal |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for name, (_, processes) in choices.items():
        quiet, loaded = rows[name, False], rows[name, True]
        ratio = loaded["samples_per_s"] / max(quiet["samples_per_s"], 1e-9)
        goal = ">= 0.5x, wait < 10%" if name.startswith("laya") else "(reference)"
        if name.endswith("(--processes)"):
            one = rows["laya-policy default (1 thread)", False]["samples_per_s"]
            goal = f"(quiet {quiet['samples_per_s'] / max(one, 1e-9):.2f}x one process)"
        used = processes * quiet["threads"]  # cores the row's work can run on
        rate = peak if used == 1 else together * min(used, cores) / cores  # measured, alone or together
        limit = quiet["samples_per_s"] / args.batch * flops / rate
        print(
            f"| {name} | {quiet['samples_per_s']:.1f} | {loaded['samples_per_s']:.1f} | {ratio:.2f}x | "
            f"{quiet['data_wait_share']:.1%} | {limit:.2f}x of {used} core{'s' * (used > 1)} | {goal} |"
        )


if __name__ == "__main__":
    main()
