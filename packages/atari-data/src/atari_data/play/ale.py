"""Playing ALE under the evaluation protocol, one decision at a time.

Each decision repeats one action for ``frameskip`` emulator frames (sticky actions applied by
ALE per frame) and sums the raw rewards. Games whose minimal set has FIRE get FIRE pressed
automatically after reset and after each lost life; those presses are not decisions, but their
rewards count. The frame a decision is taken on is the raw RGB screen after the last frame.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from atari_data.play.reseed import Reseeder
from laya_protocol.games import minimal_actions, rom_id
from laya_protocol.protocol import DATA_DECISION_CAP, Protocol


@dataclass
class Decision:
    """What a policy sees before choosing: the screen, and whether FIRE was just auto-pressed."""

    frame: np.ndarray  # uint8 [210, 160, 3]
    after_fire: bool
    step: int


class AtariGame:
    """One ALE game played by the protocol's rules."""

    def __init__(self, game: str, protocol: Protocol | None = None, keep: str | None = None, reload_rom: bool = False):
        """``keep`` ("rgb" or "grey") records each decision's last two emulator frames in
        :attr:`last_two`, for experts that look at them (checkpoint experts). ``reload_rom`` makes
        every seeded reset reload the ROM, as gymnasium does, instead of the checked shortcut
        (:mod:`atari_data.play.reseed`): the same episodes, slower."""
        # ale_py.env pulls in gymnasium; import late so `import atari_data` stays light.
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        from ale_py.env import AtariEnv

        self.game = game
        self.protocol = protocol or Protocol.ale_v5(game, decision_cap=DATA_DECISION_CAP)
        self.actions = minimal_actions(game)
        self.env = AtariEnv(
            game=rom_id(game),
            frameskip=1,
            full_action_space=self.protocol.action_set == "full",
            repeat_action_probability=self.protocol.repeat_action_probability,
            max_num_frames_per_episode=self.protocol.max_frames_per_episode,
        )
        self.ale = self.env.ale
        self.reseeder = Reseeder(self.env, shortcut=not reload_rom)
        self._fire = self.actions.index("FIRE") if self.protocol.auto_fires(game) else None
        self.score = 0.0
        self.seed = 0
        self.done = True
        self.keep = keep
        self.last_two: tuple[np.ndarray, np.ndarray] | None = None
        self.moves: list[int] = []
        self.decisions: list[int] = []

    def reset(self, seed: int) -> bool:
        """Start an episode; returns whether FIRE was auto-pressed."""
        self.reseeder.reset(seed)
        self.seed = seed  # a planning expert seeds its rollouts from it
        self.score, self.done = 0.0, False
        # Every move sent to the emulator (auto-FIREs included) and which of them were decisions:
        # with the seed, all that is needed to replay the episode frame for frame.
        self.moves = []
        self.decisions = []
        if self.keep:
            first = self._grab()
            self.last_two = (first, first)
        self._lives = self.ale.lives()
        return self._auto_fire()

    def act(self, action: int) -> tuple[float, bool]:
        """Play one decision; returns (reward, whether FIRE was auto-pressed after it)."""
        self.decisions.append(len(self.moves))
        self.moves.append(action)
        reward = self._repeat(self.env._action_set[action])
        fired = False
        lives = self.ale.lives()
        if not self.done and lives < self._lives:
            fired = self._auto_fire()
        self._lives = lives
        return reward, fired

    def replay(self, seed: int, moves: list[int], decisions: list[int]) -> Iterator[np.ndarray]:
        """Play back a recorded episode: the screen at each decision, in order.

        ``moves`` are minimal-set action indices, one per ``frameskip`` emulator frames, auto-FIREs
        included; ``decisions`` are the positions in ``moves`` that were decisions.
        """
        self.reseeder.reset(seed)
        self.score, self.done = 0.0, False
        at = set(decisions)
        for m, action in enumerate(moves):
            if m in at:
                yield self.screen()
            self._repeat(self.env._action_set[action])

    def screen(self) -> np.ndarray:
        return self.ale.getScreenRGB()

    def ram(self) -> np.ndarray:
        return self.ale.getRAM()

    def _grab(self) -> np.ndarray:
        return self.ale.getScreenRGB() if self.keep == "rgb" else self.ale.getScreenGrayscale()

    def _repeat(self, ale_action) -> float:
        reward = 0.0
        skip = self.protocol.frameskip
        for i in range(skip):
            reward += self.ale.act(ale_action)
            if self.keep and i >= skip - 2:
                assert self.last_two is not None  # reset() sets it whenever frames are kept
                self.last_two = (self.last_two[1], self._grab())
            if self.ale.game_over():
                break
        self.score += reward
        self.done = self.ale.game_over()
        return reward

    def _auto_fire(self) -> bool:
        if self._fire is None or self.done:
            return False
        self.moves.append(self._fire)
        self._repeat(self.env._action_set[self._fire])
        return True


class PreviousFrame:
    """The two-frame rule at play time: a decision's previous frame is the screen of the decision
    before it, or its own screen on an episode's first decision and right after an auto-FIRE.
    Call it once per decision, in order."""

    def __init__(self):
        self._last: np.ndarray | None = None

    def __call__(self, d: Decision) -> np.ndarray:
        prev = d.frame if d.step == 0 or d.after_fire or self._last is None else self._last
        self._last = d.frame
        return prev


def play_episode(
    game: AtariGame, seed: int, choose: Callable[[Decision], int], decision_cap: int | None = None
) -> Iterator[tuple[Decision, int]]:
    """Play one episode; yields each decision with the action ``choose`` picked, before it is played."""
    fired = game.reset(seed)
    cap = decision_cap if decision_cap is not None else game.protocol.decision_cap
    step = 0
    while not game.done and (cap is None or step < cap):
        d = Decision(game.screen(), fired, step)
        action = choose(d)
        yield d, action
        _, fired = game.act(action)
        step += 1


#: The largest seed :func:`episode_seed` gives: one uint32 word (gymnasium's reset takes any
#: non-negative int and derives ALE's own signed 32-bit seed from it).
EPISODE_SEED_MAX = 2**32 - 1


def episode_seed(seed: int, game: str, episode: int) -> int:
    """A per-episode ALE seed derived from (seed, game, episode), stable across runs and machines."""
    ss = np.random.SeedSequence([seed, int.from_bytes(game.encode(), "little") % (2**63), episode])
    return int(ss.generate_state(1)[0])
