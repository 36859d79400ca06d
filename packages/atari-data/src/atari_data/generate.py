"""Generate datasets by playing ALE and recording every decision through the shared writer.

Episode numbers encode their role, and each episode's ALE seed derives from (seed, game,
episode number), so val and train never share an episode and a rerun replays the same games:

    val episodes    1000 + i
    train episodes  2000 + i
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from atari_data.actions import resolve_game
from atari_data.play import AtariGame, episode_seed, play_episode
from atari_data.protocol import Protocol
from atari_data.writer import GameWriter, Step

log = logging.getLogger(__name__)

VAL_EPISODES_FROM = 1000
TRAIN_EPISODES_FROM = 2000


@dataclass
class GenerateConfig:
    """What `atari-data generate` plays and writes; every flag maps to one field."""

    root: str
    games: list[str] = field(default_factory=lambda: ["Pong", "Breakout"])
    source: str = "random"
    frames: int = 1
    train_episodes: int = 4
    val_episodes: int = 1
    train_frames: int = 20_000
    val_frames: int = 1_000
    decision_cap: int | None = 27_000
    seed: int = 0
    force: bool = False


def random_policy(n_actions: int, seed: int):
    rng = np.random.default_rng(seed)
    return lambda _decision: int(rng.integers(n_actions))


def random_steps(game: AtariGame, episode_seed_: int) -> Iterator[Step]:
    choose = random_policy(len(game.actions), episode_seed_)
    for d, action in play_episode(game, episode_seed_, choose):
        yield Step(d.frame, action, after_fire=d.after_fire)


def generate_game(cfg: GenerateConfig, game_name: str, progress=None) -> dict | None:
    """Write one game; returns its meta.json, or None when it was already complete."""
    game_name = resolve_game(game_name)
    proto = Protocol.ale_v5(game_name, decision_cap=cfg.decision_cap)
    game = AtariGame(game_name, proto)
    writer = GameWriter(cfg.root, cfg.source, game_name, frame_format="rgb_210x160",
                        origin="uniform-random policy, atari-data generate", license="MIT",
                        frames=cfg.frames, caps={"train": cfg.train_frames, "val": cfg.val_frames},
                        protocol=proto, seed=cfg.seed, force=cfg.force)
    if writer.complete:
        log.info("%s/%s is complete; skipping (use --force to redo)", cfg.source, game_name)
        return None
    plan = [(VAL_EPISODES_FROM + i, "val") for i in range(cfg.val_episodes)]
    plan += [(TRAIN_EPISODES_FROM + i, "train") for i in range(cfg.train_episodes)]
    for episode, split in plan:
        writer.add_episode(episode, split, random_steps(game, episode_seed(cfg.seed, game_name, episode)))
        if progress is not None:
            progress.update(1)
    return writer.finish()
