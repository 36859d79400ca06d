"""What does laya-eval add on top of the emulator?

Decisions/s of a laya-eval game (random policy, 10 episodes in lockstep, auto-FIRE bookkeeping,
the two-frame rule, validation of every answer) against raw stepping of ALE's vector
environment with the same number of environments, threads and settings, in one run; both timed
from the seeded reset to the last step. Freeway rounds last about 2,040 decisions whatever the
moves, so with 2,000-decision episodes none ends early in either measurement.

    uv run python tools/bench/eval_overhead.py [--envs 10] [--threads 2] [--decisions 2000]

Beside them, the tool a user would pick instead: ``gym.make_vec("ALE/Freeway-v5")`` with the same
sticky actions, frameskip, threads and full-size colour screens, which gives ale-py's own
AtariVectorEnv (its other settings as a user gets them); and gymnasium's generic wrappers of the
single environment, ``vectorization_mode="sync"`` (one process, one thread) and ``"async"`` (a process
per environment). All stepped raw with random moves (no policy, no bookkeeping).

Each side's figure is the best of --repeats rounds that run every side once, every other round in
reverse order, so that each sees the same stretch of this machine's drift (until 2026-12-06 each
side's repeats ran together, raw stepping first).

Goal: laya-eval at least 0.8x raw AtariVectorEnv stepping.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from ale_py.vector_env import AtariVectorEnv

from laya_eval.policies import RandomPolicy
from laya_eval.runner import play
from laya_protocol.protocol import FRAME_CAP, FRAMESKIP, STICKY_ACTIONS, Protocol
from laya_protocol.seeds import EVAL_SEED_BASE


def _step_randomly(env, envs: int, steps: int) -> float:
    """Decisions/s of ``steps`` random steps from the seeded reset; closes ``env``."""
    rng = np.random.default_rng(0)
    t = time.perf_counter()
    env.reset(seed=EVAL_SEED_BASE)
    for _ in range(steps):
        env.step(rng.integers(3, size=envs))
    dt = time.perf_counter() - t
    env.close()
    return envs * steps / dt


def raw(envs: int, threads: int, steps: int) -> float:
    env = AtariVectorEnv(
        "freeway",
        envs,
        num_threads=threads,
        img_height=210,
        img_width=160,
        grayscale=False,
        stack_num=1,
        frameskip=FRAMESKIP,
        maxpool=False,
        noop_max=0,
        reward_clipping=False,
        use_fire_reset=False,
        repeat_action_probability=STICKY_ACTIONS,
        max_num_frames_per_episode=FRAME_CAP,
    )
    return _step_randomly(env, envs, steps)


def gymnasium_vec(envs: int, threads: int, steps: int, mode: str | None) -> float:
    """Raw stepping of gymnasium's vector env, as its documentation makes one: ``mode`` None is
    make_vec's default for ALE (ale-py's AtariVectorEnv, given the threads and the full screens)."""
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    common = dict(num_envs=envs, repeat_action_probability=STICKY_ACTIONS, frameskip=FRAMESKIP, full_action_space=False)
    if mode is None:
        screens = dict(num_threads=threads, img_height=210, img_width=160, grayscale=False, stack_num=1)
        env = gym.make_vec("ALE/Freeway-v5", **common, **screens)
    else:
        env = gym.make_vec("ALE/Freeway-v5", vectorization_mode=mode, **common)
    return _step_randomly(env, envs, steps)


def ours(envs: int, threads: int, steps: int) -> float:
    ep = play(
        RandomPolicy(seed=0),
        "Freeway",
        Protocol.ale_v5("Freeway", decision_cap=steps),
        envs,
        EVAL_SEED_BASE,
        threads=threads,
    )
    assert all(ep.capped), "an episode ended early: the two runs would not do the same work"
    return sum(ep.steps) / ep.seconds


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decisions", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="2 environments, 100 decisions, one repeat: checks the bench runs (the tests run it)",
    )
    args = ap.parse_args(argv)
    if args.smoke:
        args.envs, args.decisions, args.repeats = 2, 100, 1
    run = (args.envs, args.threads, args.decisions)
    sides = {"raw": lambda: raw(*run), "ours": lambda: ours(*run)}
    sides |= {mode: lambda m=mode: gymnasium_vec(*run, m) for mode in (None, "sync", "async")}
    rates = dict.fromkeys(sides, 0.0)
    for n in range(args.repeats):  # each side once a round, every other round in reverse order
        for side, measure in list(sides.items())[:: 1 if n % 2 == 0 else -1]:
            rates[side] = max(rates[side], measure())
    r, o = rates.pop("raw"), rates.pop("ours")
    peers = rates
    print(
        f"Freeway, {args.envs} episodes in lockstep, {args.threads} threads, {args.decisions} decisions each, "
        f"best of {args.repeats} rounds, each side once a round"
    )
    print("| what | decisions/s | ratio | goal |\n| --- | ---: | ---: | ---: |")
    print(f"| raw AtariVectorEnv stepping | {r:,.0f} | 1.00x | |")
    print(f"| laya-eval, random policy | {o:,.0f} | {o / r:.2f}x | >= 0.8x |")
    for mode, rate in peers.items():
        what = "default: ale-py's AtariVectorEnv" if mode is None else f"{mode}, gymnasium's generic wrapper"
        print(
            f"| gymnasium make_vec, {what} (raw stepping) | {rate:,.0f} | {rate / r:.2f}x | "
            f"laya-eval {o / rate:.2f}x of it |"
        )


if __name__ == "__main__":
    main()
