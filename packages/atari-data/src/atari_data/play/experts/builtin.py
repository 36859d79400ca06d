"""Built-in experts: scripted players that read object positions from the game's RAM.

Each says which way it wants to push the joystick and whether to fire; :func:`joystick_probs`
turns that into a distribution over the game's own buttons, so the soft target ranks every
button by how close it is to the wanted move. No downloads, no learned weights.

RAM addresses follow the AtariARI annotations and were checked against the screen.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.play.ale import AtariGame
from atari_data.play.experts.forms import ANY_GAME_EXPERTS
from laya_protocol.games import minimal_actions

# How confident the targets are: lower is sharper.
TEMPERATURE = 0.35


def joystick(name: str) -> tuple[int, int, int]:
    """(horizontal, vertical, fire) of an ALE action name; right and up are +1."""
    h = 1 if "RIGHT" in name else -1 if "LEFT" in name else 0
    v = 1 if "UP" in name else -1 if "DOWN" in name else 0
    return h, v, int("FIRE" in name)


@cache
def joystick_probs(
    actions: tuple[str, ...], h: int | None, v: int | None, fire: int | None, temperature: float = TEMPERATURE
) -> np.ndarray:
    """Softmax over buttons by their distance from the wanted (h, v, fire); None = don't care.

    Cached: an expert asks for the same few wants over and over. Treat the result as read-only.
    """
    cost = np.zeros(len(actions))
    for i, name in enumerate(actions):
        ah, av, af = joystick(name)
        cost[i] = (
            (abs(ah - h) if h is not None else 0)
            + (abs(av - v) if v is not None else 0)
            + (abs(af - fire) if fire is not None else 0)
        )
    z = np.exp(-(cost - cost.min()) / temperature)
    p = z / z.sum()
    p.flags.writeable = False
    return p


@dataclass
class RamExpert:
    """Base of the scripted experts: subclasses implement :meth:`want`."""

    game: str
    name: str = "builtin"
    actions: tuple[str, ...] = field(init=False)
    state: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        self.actions = minimal_actions(self.game)

    def reset(self) -> None:
        self.state = {}

    def fork(self) -> RamExpert:
        """A copy with its own per-episode state, for a planner's rollout."""
        twin = copy.copy(self)
        twin.state = dict(self.state)
        return twin

    def probs(self, game: AtariGame) -> np.ndarray:
        return joystick_probs(self.actions, *self.want(game.ram()))

    def want(self, ram: np.ndarray) -> tuple[int | None, int | None, int | None]:
        raise NotImplementedError


def _mirror(value: float, low: float, high: float) -> float:
    """Where a ball moving freely would be between two walls that reflect it."""
    span = high - low
    x = (value - low) % (2 * span)
    return low + (x if x <= span else 2 * span - x)


class Pong(RamExpert):
    """Right paddle: predict where the ball meets the paddle line and get there first.

    The paddle carries momentum, so it steers on its own position one decision ahead.
    The joystick's RIGHT moves the paddle up (smaller y).
    """

    PLAYER_Y, BALL_X, BALL_Y = 51, 49, 54
    TOP, BOTTOM, PADDLE_X = 38, 203, 189
    CENTRE_OFFSET = 6  # ball y minus paddle y when the ball meets the paddle's centre

    def want(self, ram):
        py, bx, by = int(ram[self.PLAYER_Y]), int(ram[self.BALL_X]), int(ram[self.BALL_Y])
        prev, prev_py = self.state.get("ball"), self.state.get("py", py)
        self.state.update(ball=(bx, by), py=py)
        target = (self.TOP + self.BOTTOM) / 2
        if by and prev and prev[1]:
            vx, vy = bx - prev[0], by - prev[1]
            if vx > 0:
                target = _mirror(by + vy * (self.PADDLE_X - bx) / vx, self.TOP, self.BOTTOM)
            else:
                target = by
        diff = target - self.CENTRE_OFFSET - (2 * py - prev_py)
        if diff < -4:
            return 1, None, 0  # up
        if diff > 4:
            return -1, None, 0  # down
        return 0, None, 0


class Breakout(RamExpert):
    """Predict where the ball comes down to the paddle line, wall bounces included."""

    PLAYER_X, BALL_X, BALL_Y = 72, 99, 101
    LEFT, RIGHT, PADDLE_Y = 57, 199, 181
    CENTRE_OFFSET = 9  # ball x minus paddle x when the ball is over the paddle's centre
    DEAD = 10  # px off target the paddle tolerates before it moves
    # Tuned on seeds other than the baselines' (20 episodes of 4,500 decisions per setting):
    # offsets 8-13 with DEAD 4-14; 9 with 10 scored 212 a game (11 with 6, the old choice, 99), and
    # 209 against 114 on 20 further held-out episodes. DEAD 8-12 scored best at every offset tried.

    def want(self, ram):
        px, bx, by = int(ram[self.PLAYER_X]), int(ram[self.BALL_X]), int(ram[self.BALL_Y])
        prev, prev_px = self.state.get("ball"), self.state.get("px", px)
        self.state.update(ball=(bx, by), px=px)
        target = bx
        if prev:
            vx, vy = bx - prev[0], by - prev[1]
            if 0 < vy < 20 and abs(vx) < 20:
                target = _mirror(bx + vx * (self.PADDLE_Y - by) / vy, self.LEFT, self.RIGHT)
        diff = target - self.CENTRE_OFFSET - (px + 0.5 * (px - prev_px))
        if diff < -self.DEAD:
            return -1, None, 0
        if diff > self.DEAD:
            return 1, None, 0
        return 0, None, int(by == 0)  # serve when no ball is in play


class Freeway(RamExpert):
    """Cross upward lane by lane, waiting (or stepping back) while a car would reach the chicken.

    Cars keep their lane and speed, so each car's next positions are its RAM x plus its speed
    (measured from the previous decision) times the decisions ahead. Go up when the path up is
    clear for ``LOOKAHEAD`` decisions, else stay if staying is clear, else step down. The chicken
    climbs 4 px a decision; ``CLIMB`` assumes 5, which looks a little further ahead (32 points a
    game against 30 at 4 on the earlier lane map; on this one 4 and 5 both score 32).
    The lane geometry was measured from every collision of random play in RAM
    (tests/atari_data/test_generate.py checks it against the emulator).
    """

    PLAYER_Y, CARS = 14, 108  # chicken y (grows upward), then the ten lanes' car x, bottom lane first
    LANE0, LANE_H = 13, 16  # lane k spans y = 13 + 16k .. 13 + 16k + 15
    REACH_DOWN = 2  # the chicken at y covers y - 2 .. y, so a car of the lane below still hits it
    # A car up to 8 px from the chicken's x hits it, yet `hit` counts 8 px as clear (`< REACH`): in
    # random play on three seeds 3 of 235 collisions were at 8 px and none farther, and waiting for
    # those too scored 28 a game against 32.
    CHICKEN_X, REACH = 46, 8
    CLIMB, LOOKAHEAD = 5, 4

    @staticmethod
    def wrap(dx):
        """A difference of x positions on the screen cars wrap around (160 px), in -80 .. 79."""
        return (dx + 80) % 160 - 80

    def lanes(self, y: float) -> range:
        """The lanes whose cars can hit a chicken at y: one, two at a band's bottom, none on the pavements."""
        low = int((y - self.REACH_DOWN - self.LANE0) // self.LANE_H)
        return range(max(low, 0), min(int((y - self.LANE0) // self.LANE_H), 9) + 1)

    def hit(self, cars: np.ndarray, speed: np.ndarray, y: float, t: int) -> bool:
        return any(abs(self.wrap(cars[k] + speed[k] * t - self.CHICKEN_X)) < self.REACH for k in self.lanes(y))

    def want(self, ram):
        y, cars = float(ram[self.PLAYER_Y]), ram[self.CARS : self.CARS + 10].astype(float)
        prev = self.state.get("cars", cars)
        self.state["cars"] = cars
        speed = self.wrap(cars - prev)  # px per decision, wrap-around undone
        ahead = range(1, self.LOOKAHEAD + 1)
        if not any(self.hit(cars, speed, y + self.CLIMB * t, t) for t in ahead):
            return None, 1, None
        if not any(self.hit(cars, speed, y, t) for t in (1, 2)):
            return None, 0, None
        return None, -1, None


class Boxing(RamExpert):
    """Line up HEAD_OFFSET px below the opponent's RAM y at punching distance, and punch.

    The offset was measured: 12 scored 66 a game over six episodes, 8 scored 27, 4 and 0 about 0.
    """

    PLAYER_X, ENEMY_X, PLAYER_Y, ENEMY_Y = 32, 33, 34, 35
    REACH, HEAD_OFFSET = 12, 12

    def want(self, ram):
        dx = int(ram[self.ENEMY_X]) - int(ram[self.PLAYER_X])
        dy = int(ram[self.ENEMY_Y]) + self.HEAD_OFFSET - int(ram[self.PLAYER_Y])
        v = 1 if dy < -1 else -1 if dy > 1 else 0  # RAM y grows downward
        side = 1 if dx > 0 else -1
        h = side if abs(dx) > self.REACH + 1 else -side if abs(dx) < self.REACH - 1 else 0
        self.state["t"] = self.state.get("t", 0) + 1
        punch = abs(dy) <= 6 and abs(dx) <= self.REACH + 10 and self.state["t"] % 2 == 0
        return h, v, int(punch)


BUILTIN = {"Pong": Pong, "Breakout": Breakout, "Freeway": Freeway, "Boxing": Boxing}


def builtin_expert(game: str) -> RamExpert:
    if game not in BUILTIN:
        raise AtariDataError(
            f"no built-in expert for {game} (built-in: {', '.join(sorted(BUILTIN))}); "
            f"any ALE game with --expert {ANY_GAME_EXPERTS}",
            field="--expert",
        )
    return BUILTIN[game](game)
