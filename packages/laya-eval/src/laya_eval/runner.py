"""Play one game's episodes in lockstep and score them.

All episodes of a game run side by side in ALE's vector environment (one emulator per episode,
stepped by C++ threads), so the policy is called once per step with a batch of every episode that
needs a decision. Episode i is seeded ``seed_base + i``.

The protocol, per episode: ALE v5 (sticky actions, ``frameskip`` frames per step with rewards
summed unclipped, the minimal action set unless the protocol says full, frame cap); for games with FIRE, FIRE is
pressed automatically after reset and after each lost life: not a decision, no policy call,
but its reward counts. An episode ends at game over, the frame cap, or the decision cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from laya_eval.batch import Batch, PolicyError, asked, choose
from laya_eval.stdio import game_over
from laya_protocol.games import action_set, rom_id
from laya_protocol.protocol import Protocol


@dataclass
class Episodes:
    """What one game's episodes did."""

    scores: list[float]
    steps: list[int]  # decisions, auto-FIRE presses not counted
    capped: list[bool]  # stopped by the decision cap
    actions: dict[str, int]  # decisions per action name
    seconds: float
    error: str | None = None


def play(
    policy,
    game: str,
    protocol: Protocol,
    episodes: int,
    seed_base: int,
    greedy: bool = True,
    threads: int = 0,
    progress=None,
) -> Episodes:
    """Play ``episodes`` episodes of ``game``; a misbehaving policy ends the game with ``error`` set."""
    from ale_py.vector_env import AtariVectorEnv

    names = action_set(game, protocol.action_set)  # what the policy chooses among, in ALE's order
    fire = names.index("FIRE") if protocol.auto_fires(game) else None
    env = AtariVectorEnv(
        rom_id(game),
        episodes,
        num_threads=threads,
        img_height=210,
        img_width=160,
        grayscale=False,
        stack_num=1,
        frameskip=protocol.frameskip,
        maxpool=False,
        noop_max=0,
        reward_clipping=False,
        use_fire_reset=False,
        episodic_life=False,
        repeat_action_probability=protocol.repeat_action_probability,
        max_num_frames_per_episode=protocol.max_frames_per_episode,
        full_action_space=protocol.action_set == "full",
    )
    start = time.perf_counter()
    scores = np.zeros(episodes)
    steps = np.zeros(episodes, dtype=np.int64)
    done = np.zeros(episodes, dtype=bool)
    capped = np.zeros(episodes, dtype=bool)
    needs_fire = np.full(episodes, fire is not None)
    fresh = np.ones(episodes, dtype=bool)  # the next decision's previous frame is its own
    counts = np.zeros(len(names), dtype=np.int64)
    # --sample's draws follow the episodes' seeds and the game (the leading 0 keeps earlier runs' draws)
    rng = np.random.default_rng([0, seed_base, *game.encode()])
    cap = protocol.decision_cap
    error = None
    try:
        if hasattr(policy, "reset"):
            asked(policy.reset, game, names, what="reset ")
        obs, info = env.reset(seed=seed_base)
        frames = obs[:, 0]
        last = frames.copy()
        all_rows = np.arange(episodes)
        lives = info["lives"].copy()
        while not done.all():
            firing = needs_fire & ~done
            decide = ~done & ~firing
            act = np.zeros(episodes, dtype=np.int64)
            if fire is not None:
                act[firing] = fire
            if decide.any():
                # Arrays handed to the policy are valid during the call; every step's screens are a
                # fresh array from the environment, so the previous ones are kept by reference.
                if fresh.any():
                    last[fresh] = frames[fresh]  # first decision, or just after an auto-FIRE
                if decide.all():
                    idx, cur, prev = all_rows, frames, last
                else:
                    idx = np.flatnonzero(decide)
                    cur, prev = frames[idx], last[idx]
                batch = Batch(game, names, cur, prev, steps[idx] == 0, idx)
                chosen = choose(asked(policy, batch), batch, greedy, rng)
                act[idx] = chosen
                counts += np.bincount(chosen, minlength=len(names))
                if decide.all():
                    last = frames
                else:
                    last[idx] = cur
                fresh[idx] = False
                steps[idx] += 1
            obs, reward, term, trunc, info = env.step(act)
            frames = obs[:, 0]
            live = ~done
            scores[live] += reward[live]
            over = live & (term | trunc)
            lost = live & ~over & (info["lives"] < lives)
            needs_fire[firing] = False
            fresh[firing] = True
            if fire is not None:
                needs_fire[lost] = True
            lives = info["lives"].copy()
            hit_cap = live & ~over & (steps >= cap) if cap is not None else np.zeros(episodes, dtype=bool)
            capped |= hit_cap
            finished = over | hit_cap
            if progress is not None and finished.any():
                progress.update(int(finished.sum()))
            done |= finished
        game_over(policy)
    except PolicyError as e:
        error = str(e)
    finally:
        env.close()
    return Episodes(
        scores=scores.tolist(),
        steps=steps.tolist(),
        capped=capped.tolist(),
        actions={n: int(c) for n, c in zip(names, counts, strict=True)},
        seconds=round(time.perf_counter() - start, 3),
        error=error,
    )
