"""The planning expert: the emulator is a perfect model of its game, so look ahead in it.

At each decision, for every button of the game's minimal set, the planner restores the current
state into an emulator of its own, presses the button for one decision and then lets a base
policy play on to a horizon, a few times over (rollouts). A button's value is the mean of its
rollouts' returns (over a base, less a charge for doubt: below): rewards summed per decision as
the protocol sums them, discounted by :data:`GAMMA` per decision, and a rollout that loses a life
stops there with a penalty. The soft target is a softmax over the values at a temperature
proportional to their spread, so the expert gives graded probabilities, as a trained agent does,
and its label is the best button.

Rollouts never touch the game's own emulator or its random stream: they run with sticky actions
off and draw the stickiness themselves, at the protocol's repeat probability, from a stream seeded
by (the episode's ALE seed, decision number). They model the 0.25 chance of a repeated move
without seeing which way the real one falls, and the same command gives the same bytes.

With a base, rollout r of every button meets the same sticky repeats, and the planner leaves the
base's own choice only on evidence (:func:`on_evidence`): a guard against a few lucky rollouts,
not a guarantee of never doing worse than the base.

``planner/K`` also holds a button for 2, 4, ... K decisions before the base takes over (the holds
take turns over a button's rollouts, so the budget is the same) and values a button by its best
hold: one step of improvement over more choices than one press. Freeway needs them: its built-in
expert waits for a car that two presses of UP would slip ahead of, and no single press followed by
the base finds that. At 4 rollouts and 4 holds each hold has one rollout, so the charge for doubt
(:func:`on_evidence`) has nothing to charge and a button is worth its best single rollout.

Where buttons' returns tie (no reward within reach, as in most of Freeway), a bonus below any
reward breaks the tie: with a base, the base's own probability for the button (so the planner
follows its base where it sees nothing better); with the random base, novelty in the manner of
IW(1) (Lipovetzky et al. 2015), for each RAM (byte, value) pair a rollout reaches that no decision
of this episode has shown yet. That points the planner at new ground instead of at button 0.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.play.ale import AtariGame
from laya_protocol.games import minimal_actions, rom_id

#: Emulator frames per decision, all rollouts together: about a quarter second of one core here
#: (tools/bench/planner.py measures it).
DEFAULT_FRAMES = 3_000
#: Rollouts per button when the budget allows; each rollout is at least MIN_HORIZON decisions.
#: Measured on Breakout at 1,000 frames (2 episodes of 250 decisions): 1, 2, 4 and 8 rollouts a
#: button scored 9, 12, 13 and 6 points (sticky moves make one rollout a noisy estimate; 8 leave
#: each too short to see the ball lost).
ROLLOUTS = 4
MIN_HORIZON = 8
#: Per-decision discount: of two equal returns, the sooner one is worth more.
GAMMA = 0.99
#: A lost life costs this many times the largest reward of one decision seen in the rollouts (at least 1).
LIFE_PENALTY = 2.0
#: The softmax temperature as a fraction of the values' spread: the worst button gets e^-4 of the best's weight.
TEMPERATURE = 0.25
#: Novelty's total weight, below the smallest discounted reward difference that matters.
NOVELTY_WEIGHT = 1e-3


#: The most emulator frames a decision may be given: about 80 s of one core each, far past any use; more
#: sized a rollout array past memory (10^12 asked for 310 GiB, a traceback).
MAX_FRAMES = 1_000_000


def check_budget(frames: int) -> None:
    if not 1 <= frames <= MAX_FRAMES:
        raise AtariDataError(f"{frames} frames per decision (expected 1 to {MAX_FRAMES:,})", field="--planner-frames")


#: ``planner/K`` -> its holds: one hold a rollout, so the longest is 2 ** (ROLLOUTS - 1).
HOLDS = {str(2**i): tuple(2**j for j in range(i + 1)) for i in range(1, ROLLOUTS)}


def planner_holds(kind: str) -> tuple[int, ...]:
    """``planner`` holds a button for one decision; ``planner/K`` also for 2, 4, ... K decisions."""
    _, slash, most = kind.partition("/")
    if not slash:
        return (1,)
    if most not in HOLDS:
        raise AtariDataError(f"planner/{most}: the longest hold must be {', '.join(HOLDS)} decisions", field="--expert")
    return HOLDS[most]


def sticky_free_emulator(game: str, max_frames: int = 0):
    """A bare ALE of ``game`` with sticky actions off, so deterministic: the rollouts draw their
    own repeats (tools/exact_optimum.py searches it, tools/bench/planner.py steps it raw)."""
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)
    ale = ALEInterface()
    ale.setFloat("repeat_action_probability", 0.0)
    ale.setInt("max_num_frames_per_episode", max_frames)
    path = roms.get_rom_path(rom_id(game))
    assert path is not None  # every game name resolves to a ROM ale-py ships
    ale.loadROM(path)
    return ale


def on_evidence(outcomes: np.ndarray, own: int) -> np.ndarray:
    """Button values [buttons] from rollout outcomes [buttons, rollouts] that leave ``own`` (the
    base's argmax at this state) only on evidence. Rollout r of every button met the same sticky
    repeats (common random numbers), so a button's rollout-by-rollout difference from ``own`` is what
    the button did; each other button is charged one standard error of those differences (about an
    84% one-sided guard), so one that won a few rollouts and lost the rest stays below ``own``. With
    one rollout a button there is no error to charge: the plain means."""
    values = outcomes.mean(1)
    if outcomes.shape[1] < 2:
        return values
    return values - (outcomes - outcomes[own]).std(1, ddof=1) / np.sqrt(outcomes.shape[1])


@runtime_checkable
class Base(Protocol):
    """An expert that can play a planner's rollouts: it forks its per-episode state per rollout."""

    name: str

    def reset(self) -> None: ...

    def probs(self, game) -> np.ndarray: ...

    def fork(self) -> Base: ...


class SimGame:
    """What an expert reads of a game (RAM, recent frames, its actions), from the planner's emulator."""

    def __init__(self, ale, game: str, actions: tuple[str, ...], keep: str | None):
        self.ale, self.game, self.actions, self.keep = ale, game, actions, keep
        self.last_two: tuple[np.ndarray, np.ndarray] | None = None

    def ram(self) -> np.ndarray:
        return self.ale.getRAM()

    def grab(self) -> np.ndarray:
        return self.ale.getScreenRGB() if self.keep == "rgb" else self.ale.getScreenGrayscale()


class Planner:
    """Rollout planning in a private emulator; ``base`` plays the rollouts (None: uniform random)."""

    def __init__(
        self,
        game: str,
        base: Base | None = None,
        budget: int = DEFAULT_FRAMES,
        name: str = "planner",
        holds: tuple[int, ...] = (1,),
    ):
        check_budget(budget)
        if not holds or holds[0] != 1:
            raise ValueError(f"holds {holds} must start with 1 (a single press)")
        self.game, self.base, self.budget, self.name, self.holds = game, base, budget, name, holds
        self.actions = minimal_actions(game)
        self.frames = getattr(base, "frames", None)  # what AtariGame keeps of each decision for a checkpoint base
        self.frames_used = 0  # emulator frames the rollouts played, for the bench
        self._sim: SimGame | None = None
        self._seen = np.zeros((128, 256), bool)  # RAM (byte, value) pairs this episode's decisions showed

    def reset(self) -> None:
        self._seen[:] = False
        if self.base is not None:
            self.base.reset()

    def split(self, frameskip: int) -> tuple[int, int]:
        """(rollouts per button, horizon in decisions) for the budget: as many rollouts as allowed
        up to :data:`ROLLOUTS` while each keeps :data:`MIN_HORIZON` decisions, the rest to depth."""
        per_button = self.budget // (len(self.actions) * frameskip)
        rollouts = max(1, min(ROLLOUTS, per_button // MIN_HORIZON))
        return rollouts, max(1, per_button // rollouts)

    def hold_of(self, rollouts: int) -> list[int]:
        """How many decisions each rollout of a button holds it before the base takes over: the
        holds in turn (rollout r holds ``holds[r % n]``), as many of them as there are rollouts."""
        n = min(len(self.holds), rollouts)
        return [self.holds[r % n] for r in range(rollouts)]

    def _emulator(self, game: AtariGame) -> SimGame:
        if self._sim is None:
            ale = sticky_free_emulator(self.game, game.protocol.max_frames_per_episode or 0)
            self._sim = SimGame(ale, self.game, self.actions, self.frames)
        return self._sim

    def probs(self, game: AtariGame) -> np.ndarray:
        values = self.values(game)
        spread = float(values.max() - values.min())
        if spread <= 0:
            return np.full(len(values), 1.0 / len(values))
        z = np.exp((values - values.max()) / (TEMPERATURE * spread))
        return z / z.sum()

    def values(self, game: AtariGame) -> np.ndarray:
        """Each button's value at the game's current state, from its rollouts: with holds, that of its
        best hold, each hold's rollouts valued alone (paired with the base's own button's rollouts of
        the same hold, which met the same dice)."""
        returns, lost, novelty, biggest, prior = self.rollouts(game)
        hold = np.array(self.hold_of(returns.shape[1]))
        groups = [hold == k for k in dict.fromkeys(hold.tolist())]
        # The penalty is in the game's own reward units, known once the rollouts have shown them.
        if prior is not None:  # ties go to the base's own choice
            outcomes, own = returns - LIFE_PENALTY * biggest * lost, int(np.argmax(prior))
            return np.max([on_evidence(outcomes[:, g], own) for g in groups], 0) + NOVELTY_WEIGHT * prior
        values = np.max([returns[:, g].mean(1) - LIFE_PENALTY * biggest * lost[:, g].mean(1) for g in groups], 0)
        horizon = self.split(game.protocol.frameskip)[1]
        return values + NOVELTY_WEIGHT * novelty.mean(1) / (128 * horizon)

    def rollouts(self, game: AtariGame) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray | None]:
        """Every button's rollouts from the game's current state: (discounted returns [buttons,
        rollouts], the discount at which each lost a life (0 if none), RAM pairs new to the episode
        that each reached, the largest one-decision reward seen (at least 1), the base's probabilities
        or None)."""
        sim = self._emulator(game)
        ale, skip, sticky = sim.ale, game.protocol.frameskip, game.protocol.repeat_action_probability
        buttons = game.env._action_set
        prior: np.ndarray | None = None
        rng = np.random.default_rng(np.random.SeedSequence([game.seed, len(game.decisions), 7]))
        if self.base is not None:
            prior = self.base.probs(game)  # the base follows the real episode, so its forks start from here
        root, root_lives = game.ale.cloneState(), game.ale.lives()
        rows = np.arange(128)
        self._seen[rows, game.ram()] = True
        last = buttons[game.moves[-1]] if game.moves else buttons[0]
        rollouts, horizon = self.split(skip)
        hold = self.hold_of(rollouts)

        returns = np.zeros((len(buttons), rollouts))
        lost = np.zeros((len(buttons), rollouts))  # the discount at which a life was lost, 0 if none
        novelty = np.zeros((len(buttons), rollouts))
        biggest = 1.0
        # Over a base, rollout r of every button meets the same sticky repeats, for `on_evidence`'s
        # paired differences. Random rollouts keep their own draws per button: shared random moves
        # scored worse on Boxing (14.5 against 18.5, 6 episodes of 100 decisions at 1,000 frames, not
        # significant), and the random planner's data keeps the bytes its measured tables came from.
        shared = rng.random((rollouts, horizon * skip)) < sticky if self.base is not None else None
        for a in range(len(buttons)):
            for r in range(rollouts):
                ale.restoreState(root)
                sim.last_two = game.last_two
                if shared is None:
                    repeat = rng.random(horizon * skip) < sticky
                    moves = rng.integers(len(buttons), size=horizon)
                else:
                    repeat = shared[r]
                base = self.base.fork() if self.base is not None else None
                reached = np.zeros((128, 256), bool)
                applied, f = last, 0
                for d in range(horizon):
                    if d < hold[r]:
                        move = a
                        if d and base is not None:
                            base.probs(sim)  # the base watches the held decisions (its memory, e.g. cars' speeds)
                    else:
                        move = int(np.argmax(base.probs(sim))) if base is not None else int(moves[d])
                    reward = 0.0
                    for i in range(skip):
                        if not repeat[f + i]:
                            applied = buttons[move]
                        reward += ale.act(applied)
                        if sim.keep and i >= skip - 2:
                            frame = sim.grab()
                            sim.last_two = (frame, frame) if sim.last_two is None else (sim.last_two[1], frame)
                        if ale.game_over():
                            break
                    f += skip
                    self.frames_used += i + 1
                    biggest = max(biggest, abs(reward))
                    returns[a, r] += GAMMA**d * reward
                    reached[rows, ale.getRAM()] = True
                    if ale.lives() < root_lives or (ale.game_over() and not ale.game_truncated()):
                        lost[a, r] = GAMMA**d
                        break
                    if ale.game_over():
                        break
                novelty[a, r] = (reached & ~self._seen).sum()
        return returns, lost, novelty, biggest, prior
