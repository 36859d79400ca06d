"""ViZDoom as a second platform: the ``basic`` scenario, its labels-buffer expert, and its data.

``basic`` is one room with one monster along the far wall; the player can strafe left, strafe
right or shoot (+106 for the kill, -5 per missed shot, -1 per tic, 300 tics at most). The expert
reads ViZDoom's labels buffer: it ignores the player, puffs, blood and dead things, takes the
largest remaining box, shoots when that box covers the crosshair column (the screen's centre,
2 px margin) and otherwise strafes toward the box's centre.

``generate_doom`` writes source ``doom_basic`` through the shared writer: 320x240 RGB screens as
rendered, two frames (the previous decision's screen), an epsilon-expert behaviour (30% random
buttons), the expert's button as ``label`` only on frames with a visible monster (the rest are
counted as ``no_monster``), val episodes seeded 1000+i and train 2000+i.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.writer import GameWriter, Step

SCENARIOS = {"basic": ("basic.cfg", "DoomBasic")}
TICS_PER_DECISION = 4
IGNORED = ("DoomPlayer", "BulletPuff", "Blood", "Dead")
CROSSHAIR_MARGIN = 2
VAL_SEEDS_FROM, TRAIN_SEEDS_FROM = 1_000, 2_000


def make_game(scenario: str = "basic", seed: int = 0):
    """A headless DoomGame for ``scenario`` with RGB screens and the labels buffer on."""
    try:
        import vizdoom as vzd
    except ImportError:
        raise AtariDataError("ViZDoom needs the vizdoom extra: pip install 'atari-data[vizdoom]'") from None
    if scenario not in SCENARIOS:
        raise AtariDataError(f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})", field="--scenario")
    game = vzd.DoomGame()
    game.load_config(os.path.join(vzd.scenarios_path, SCENARIOS[scenario][0]))
    game.set_window_visible(False)
    game.set_screen_format(vzd.ScreenFormat.RGB24)
    game.set_screen_resolution(vzd.ScreenResolution.RES_320X240)
    game.set_labels_buffer_enabled(True)
    game.set_seed(seed)
    game.init()
    return game


def buttons(game) -> list[str]:
    return [b.name for b in game.get_available_buttons()]


def target_box(state):
    """The largest label that is not the player, a puff, blood or a dead thing; None when none."""
    boxes = [lb for lb in state.labels if not any(lb.object_name.startswith(x) or x in lb.object_name
                                                  for x in IGNORED)]
    return max(boxes, key=lambda lb: lb.width * lb.height, default=None)


def expert_button(state, names: list[str], width: int) -> int | None:
    """ATTACK when the target covers the crosshair column, else strafe toward it; None without one."""
    box = target_box(state)
    if box is None:
        return None
    centre = width / 2
    if box.x - CROSSHAIR_MARGIN <= centre <= box.x + box.width + CROSSHAIR_MARGIN:
        return names.index("ATTACK")
    return names.index("MOVE_LEFT" if box.x + box.width / 2 < centre else "MOVE_RIGHT")


Behaviour = Callable[[object, int | None, np.random.Generator], int]


def epsilon_expert(epsilon: float, n: int) -> Behaviour:
    def behave(state, expert: int | None, rng: np.random.Generator) -> int:
        if expert is None or rng.random() < epsilon:
            return int(rng.integers(n))
        return expert
    return behave


def play(game, seed: int, behave: Behaviour, rng: np.random.Generator) -> Iterator[tuple[np.ndarray, int | None, int]]:
    """(screen, expert button or None, button played) per decision of one episode; the episode's
    reward is ``game.get_total_reward()`` once the iterator is exhausted."""
    names = buttons(game)
    game.set_seed(seed)
    game.new_episode()
    width = game.get_screen_width()
    while not game.is_episode_finished():
        state = game.get_state()
        expert = expert_button(state, names, width)
        action = behave(state, expert, rng)
        yield state.screen_buffer, expert, action
        game.make_action([i == action for i in range(len(names))], TICS_PER_DECISION)


def episode_scores(game, seeds, behave: Behaviour, rng_seed: int = 0) -> dict:
    """Mean reward, kill rate (the episode ended before its timeout: the monster died) and steps."""
    rng = np.random.default_rng(rng_seed)
    rewards, steps, kills = [], [], []
    for s in seeds:
        steps.append(sum(1 for _ in play(game, s, behave, rng)))
        rewards.append(game.get_total_reward())
        kills.append(game.get_episode_time() < game.get_episode_timeout())
    return {"mean": float(np.mean(rewards)), "kill_rate": float(np.mean(kills)), "steps": float(np.mean(steps)),
            "episodes": len(rewards)}


@dataclass
class DoomConfig:
    root: str
    scenario: str = "basic"
    train_frames: int = 20_000
    val_frames: int = 2_000
    epsilon: float = 0.3
    seed: int = 0
    force: bool = False


def generate_doom(cfg: DoomConfig) -> dict | None:
    """Write ``<root>/doom_<scenario>/<Game>``; returns its meta.json (None when already complete)."""
    game = make_game(cfg.scenario, cfg.seed)
    names = buttons(game)
    name = SCENARIOS[cfg.scenario][1]
    with GameWriter(cfg.root, f"doom_{cfg.scenario}", name, frame_format="rgb_240x320", frames=2, actions=names,
                    platform="vizdoom", origin=f"atari-data generate, ViZDoom {cfg.scenario}, labels-buffer "
                    f"expert, epsilon {cfg.epsilon}", license="MIT", seed=cfg.seed, force=cfg.force,
                    caps={"train": cfg.train_frames, "val": cfg.val_frames}) as writer:
        if writer.complete:
            game.close()
            return None
        behave = epsilon_expert(cfg.epsilon, len(names))
        plan = (("val", VAL_SEEDS_FROM, cfg.val_frames), ("train", TRAIN_SEEDS_FROM, cfg.train_frames))
        for split, first, cap in plan:
            labelled, i = 0, 0
            while labelled < cap:
                seed = cfg.seed * 1_000_003 + first + i
                rng = np.random.default_rng(seed)
                steps = list(_labelled(play(game, seed, behave, rng), writer))
                labelled += len(steps)
                writer.add_episode(first + i, split, iter(steps))
                i += 1
        game.close()
        return writer.finish()


def _labelled(decisions, writer: GameWriter) -> Iterator[Step]:
    prev = None
    for screen, expert, action in decisions:
        frame = np.ascontiguousarray(screen)
        if expert is None:
            writer.drop("no_monster")
        else:
            yield Step(frame=frame, label=expert, prev_frame=frame if prev is None else prev,
                       provenance={"played": action})
        prev = frame
