"""ViZDoom as a second platform: data from the ``basic`` scenario and its labels-buffer expert
(both defined in :mod:`laya_protocol.doom`, shared with the judge).

``generate_doom`` writes source ``doom_basic`` through the shared writer: 320x240 RGB screens as
rendered, two frames (the previous decision's screen), an epsilon-expert behaviour (30% random
buttons), the expert's button as ``label`` only on frames with a visible monster (the rest are
counted as ``no_monster``), val and train episodes numbered as :mod:`laya_protocol.seeds` says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout.writer import DEFAULT_CAPS, GameWriter, Step
from atari_data.produce.generate import check_counts, check_probability, check_room
from atari_data.publish.repo import check_out_root
from laya_protocol import doom
from laya_protocol.doom import TICS_PER_DECISION, buttons, expert_button
from laya_protocol.errors import UnknownName
from laya_protocol.seeds import EVAL_SEED_BASE, TRAIN_EPISODES_FROM, VAL_EPISODES_FROM, episodes_room


def make_game(scenario: str = doom.SCENARIO, seed: int = 0):
    """A headless DoomGame for ``scenario`` with RGB screens and the labels buffer on."""
    try:
        return doom.make_game(scenario, seed)
    except ImportError:
        raise AtariDataError("ViZDoom needs the vizdoom extra: pip install 'atari-data[vizdoom]'") from None
    except UnknownName as e:
        raise AtariDataError(str(e), field="--scenario") from None


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
    return {
        "mean": float(np.mean(rewards)),
        "kill_rate": float(np.mean(kills)),
        "steps": float(np.mean(steps)),
        "episodes": len(rewards),
    }


@dataclass
class DoomConfig:
    root: str
    scenario: str = doom.SCENARIO
    train_frames: int = DEFAULT_CAPS["train"]  # as generate's ALE games
    val_frames: int = DEFAULT_CAPS["val"]
    epsilon: float = 0.3
    seed: int = 0
    force: bool = False

    def __post_init__(self):
        check_out_root(self.root)
        check_counts(
            ("--train-frames", self.train_frames, 1), ("--val-frames", self.val_frames, 0), ("--seed", self.seed, 0)
        )
        if self.seed > MAX_SEED:
            raise AtariDataError(
                f"{self.seed}: expected at most {MAX_SEED:,} (ViZDoom seeds are 32-bit)", field="--seed"
            )
        check_probability(self.epsilon, "--epsilon")


#: ViZDoom seeds episode ``e`` of ``--seed S`` with ``S * SEED_STRIDE + e``, an unsigned 32-bit number.
SEED_STRIDE = 1_000_003
MAX_SEED = (2**32 - 1 - EVAL_SEED_BASE) // SEED_STRIDE


def episode_seed(seed: int, episode: int) -> int:
    """ViZDoom's seed for a data episode. At --seed 0 the seed is the episode number, so the episodes
    stay within their roles' numbers (``episodes_room``, checked by ``_generate``): train episode
    100,000 would play the judge's first episode."""
    return seed * SEED_STRIDE + episode


def generate_doom(cfg: DoomConfig) -> dict | None:
    """Write ``<root>/doom_<scenario>/<Game>``; returns its meta.json (None when already complete)."""
    game = make_game(cfg.scenario, cfg.seed)
    try:
        return _generate(cfg, game)
    finally:
        game.close()


def _generate(cfg: DoomConfig, game) -> dict | None:
    plan = (("val", VAL_EPISODES_FROM, cfg.val_frames), ("train", TRAIN_EPISODES_FROM, cfg.train_frames))
    # an episode ends at the scenario's timeout: at most this many decisions, fewer of them labelled
    most = -(-game.get_episode_timeout() // TICS_PER_DECISION)
    check_room([(split, first, cap, 0) for split, first, cap in plan], most, cap_flag=None)
    names = buttons(game)
    with GameWriter(
        cfg.root,
        f"doom_{cfg.scenario}",
        doom.game_name(cfg.scenario),
        frame_format="rgb_240x320",
        frames=2,
        actions=names,
        platform="vizdoom",
        origin=f"atari-data generate, ViZDoom {cfg.scenario}, labels-buffer expert, epsilon {cfg.epsilon}",
        license="MIT",
        seed=cfg.seed,
        force=cfg.force,
        caps={"train": cfg.train_frames, "val": cfg.val_frames},
    ) as writer:
        if writer.complete:
            return None
        behave = epsilon_expert(cfg.epsilon, len(names))
        for split, first, cap in plan:
            labelled, i = 0, 0
            while labelled < cap:
                if i == episodes_room(first):  # frames without a monster are not labelled
                    raise AtariDataError(
                        f"{cap:,} {split} records were not labelled in the {i:,} episodes a game holds",
                        field=f"--{split}-frames",
                    )
                seed = episode_seed(cfg.seed, first + i)
                rng = np.random.default_rng(seed)
                steps = list(_labelled(play(game, seed, behave, rng), writer))
                labelled += len(steps)
                writer.add_episode(first + i, split, iter(steps))
                i += 1
        return writer.finish()


def _labelled(decisions, writer: GameWriter) -> Iterator[Step]:
    prev = None
    for screen, expert, action in decisions:
        frame = np.ascontiguousarray(screen)
        if expert is None:
            writer.drop("no_monster")
        else:
            yield Step(
                frame=frame, label=expert, prev_frame=frame if prev is None else prev, provenance={"played": action}
            )
        prev = frame
