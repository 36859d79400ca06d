"""Generate expert datasets by playing ALE, through the shared episode writer.

Behaviour: with probability ``epsilon`` a uniform random action, otherwise a sample from the
expert's distribution. ``target`` is the expert's distribution before that mix (6 decimals),
``label`` its argmax, and the move actually played goes into ``provenance["played"]``.

Episode numbers encode their role (:mod:`laya_protocol.seeds`: val, train, expert and random
baselines), and every ALE seed and behaviour random stream derives from (seed, game, episode
number), so roles never share an episode and a rerun replays the same games byte for byte.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import GameDir
from atari_data.layout.writer import DEFAULT_CAPS, GameWriter, Step
from atari_data.play.actions import resolve_game
from atari_data.play.ale import AtariGame, Decision, episode_seed, play_episode
from atari_data.play.experts import Expert, expert_id, is_planner, load_expert
from atari_data.play.experts.base import check_holds, playable_games
from atari_data.play.experts.forms import EXPERT_FORMS
from atari_data.play.experts.planner import DEFAULT_FRAMES as PLANNER_FRAMES
from atari_data.play.experts.planner import HOLDS, check_budget
from atari_data.produce.executors import ahead
from atari_data.publish.repo import check_out_root
from atari_data.schema import ALE_FRAME_FORMAT
from atari_data.schema.types import INT64_MAX
from laya_protocol.config import csv, listed, option
from laya_protocol.names import score_key, scores_key
from laya_protocol.protocol import BASELINE_CAP, DATA_DECISION_CAP, Protocol
from laya_protocol.ray import EXECUTORS
from laya_protocol.seeds import (
    EXPERT_BASELINE_FROM,
    RANDOM_BASELINE_FROM,
    TRAIN_EPISODES_FROM,
    VAL_EPISODES_FROM,
    episodes_room,
)
from laya_protocol.wording import counted

log = logging.getLogger(__name__)

SOURCES = {"expert": 1, "expert2f": 2}  # source -> frames per record


@dataclass
class GenerateConfig:
    """What `atari-data generate` plays and writes; every flag maps to one field."""

    root: str = option(help="layout root folder to write into")
    games: list[str] = option(
        help="ALE v5 game names, comma-separated", factory=lambda: ["Pong", "Breakout", "Freeway", "Boxing"]
    )
    source: str = option("expert2f", "expert2f also records the previous frame as prev_image", choices=tuple(SOURCES))
    expert: str = option(
        "builtin",
        f"{EXPERT_FORMS}: builtin reads the RAM (scripted experts), planner rolls out in the emulator, BASE "
        "playing the rollouts (uniform random when omitted; /K, K one of "
        f"{', '.join(HOLDS)}, also tries holding each button 2, 4 ... K decisions before BASE takes over)",
    )
    planner_frames: int = option(PLANNER_FRAMES, "a planner's emulator frames per decision, all rollouts together")
    train_frames: int = option(
        DEFAULT_CAPS["train"],
        "train records per game at most; episodes are played until there are this many decisions and subsampled evenly",
    )
    val_frames: int = option(DEFAULT_CAPS["val"], "val records per game at most")
    min_train_episodes: int = option(3, "play at least this many train episodes")
    epsilon: float = option(0.1, "probability of a uniform random move instead of the expert's")
    game_epsilon: dict[str, float] = option(
        factory=dict, cli=False, help="a game's own epsilon, in place of ``epsilon`` (--epsilon 0.3,Pong=0.5)"
    )
    decision_cap: int | None = option(
        DATA_DECISION_CAP, "decisions per episode at most (the default is ALE v5's frame limit)"
    )
    baseline_episodes: int = option(5, "episodes each for the expert and random baselines; 0 skips them")
    seed: int = option(0, "every ALE seed and random stream derives from it")
    workers: int = option(
        1, "games generated in parallel processes; with a planner, episodes of each game instead (same bytes)"
    )
    executor: str = option(
        "local",
        "ray fans games out over a Ray cluster (RAY_ADDRESS, else a local one); needs atari-data[ray]",
        choices=EXECUTORS,
    )
    force: bool = option(False, "rewrite games that are already complete")

    def __post_init__(self) -> None:
        listed(self)
        check_out_root(self.root)
        check_counts(
            ("--train-frames", self.train_frames, 1),
            ("--val-frames", self.val_frames, 0),
            ("--min-train-episodes", self.min_train_episodes, 1),
            ("--baseline-episodes", self.baseline_episodes, 0),
            ("--workers", self.workers, 1),
            ("--decision-cap", 1 if self.decision_cap is None else self.decision_cap, 1),
        )
        check_seed(self.seed)
        check_room(split_plan(self.train_frames, self.val_frames, self.min_train_episodes), self.decision_cap)
        if self.source not in SOURCES:
            raise AtariDataError(f"unknown source {self.source!r} (expected {' or '.join(SOURCES)})", field="--source")
        check_probability(self.epsilon, "--epsilon")
        check_budget(self.planner_frames)
        check_holds(self.expert)
        self.games = playable_games(self.expert, self.games)
        if not isinstance(self.game_epsilon, dict):
            raise AtariDataError("is not a mapping of games to probabilities", field="game_epsilon")
        own: dict[str, float] = {}
        for name, p in self.game_epsilon.items():
            game = resolve_game(str(name), "--epsilon")
            if game not in self.games:
                raise AtariDataError(f"{name}={p}: {game} is not among --games", field="--epsilon")
            if type(p) not in (int, float) or not 0 <= p <= 1:  # True is no probability, NaN fails the range
                raise AtariDataError(f"{name}={p}: not a probability", field="--epsilon")
            if game in own:
                raise AtariDataError(f"{game} is given twice", field="--epsilon")
            own[game] = float(p) + 0.0  # -0.0 is 0.0: the origin it writes is the one a rerun compares
        self.game_epsilon = own

    def epsilon_of(self, game: str) -> float:
        """The probability of a random move while ``game``'s expert plays."""
        return self.game_epsilon.get(game, self.epsilon)


def parse_epsilon(text: str) -> tuple[float | None, dict[str, float]]:
    """``--epsilon``: a probability for every game, and ``GAME=P`` for one (``0.3,Pong=0.5``); the
    first None when only games are given. Game names are resolved by the config that takes them."""
    every, games = None, {}
    parts = csv(str(text))
    if not parts:
        raise AtariDataError(f"{text!r}: expected a probability, or GAME=probability", field="--epsilon")
    for part in parts:
        name, eq, value = part.partition("=")
        name, value = (name.strip(), value) if eq else ("", name)
        try:
            p = float(value) + 0.0
        except ValueError:
            p = None
        if p is None or (eq and not name):
            raise AtariDataError(f"{part}: expected a probability, or GAME=probability", field="--epsilon")
        if not eq and every is not None:
            raise AtariDataError(
                f"{text}: one probability for every game, then GAME=P for one (0.3,Pong=0.5)", field="--epsilon"
            )
        if name in games:
            raise AtariDataError(f"{name} is given twice", field="--epsilon")
        if eq:
            games[name] = p
        else:
            every = p
    return every, games


def epsilon_flag(every: float, games: dict[str, float]) -> str:
    """The ``--epsilon`` text of a probability for every game and each game's own."""
    return ",".join([f"{every}", *(f"{g}={p}" for g, p in games.items())])


def epsilon_text(every: float, games: dict[str, float]) -> str:
    """``0.3 (Pong 0.5)``: the probabilities as a sentence gives them."""
    return f"{every}" + (f" ({', '.join(f'{g} {p}' for g, p in games.items())})" if games else "")


def check_probability(value: float, flag: str) -> None:
    """A probability in [0, 1] (NaN is none)."""
    if not 0 <= value <= 1:
        raise AtariDataError(f"{value} is not a probability", field=flag)


def check_counts(*flags: tuple[str, int, int]) -> None:
    """Each (flag, value, least): a count below its least is refused before anything is played (an
    episode capped at 0 decisions adds none, and the loop filling a split would never end)."""
    for flag, value, least in flags:
        if value < least:
            raise AtariDataError(f"{value}: expected {least} or more", field=flag)


def check_seed(seed: int) -> None:
    """A data seed meta.json can hold (its integers are int64), refused before anything is played."""
    if not 0 <= seed <= INT64_MAX:
        raise AtariDataError(f"{seed}: expected 0 to {INT64_MAX:,} (meta.json's seed is an int64)", field="--seed")


def check_room(
    plan: Sequence[tuple[str, int, int, int]],
    decision_cap: int | None,
    dagger: bool = False,
    cap_flag: str | None = "--decision-cap",
) -> None:
    """Refuse, before anything is played, a plan of ``fill_splits`` whose split needs more episodes
    than its numbers hold (laya_protocol.seeds): an episode adds at most ``decision_cap`` decisions
    (``cap_flag`` raises it, where there is one)."""
    most = DATA_DECISION_CAP if decision_cap is None else decision_cap
    for split, first, frames, min_episodes in plan:
        room = episodes_room(first, dagger)
        by_frames = -(-frames // most)
        where = "a DAgger round" if dagger else "a game"
        if min_episodes > room:
            raise AtariDataError(
                f"{min_episodes:,}: {where} holds at most {room:,} {split} episodes", field=f"--min-{split}-episodes"
            )
        if by_frames > room:
            raise AtariDataError(
                f"{frames:,} {split} records need at least {by_frames:,} episodes of at most "
                f"{counted(most, 'decision', grouped=True)}; "
                f"{where} holds at most {room:,} {split} episodes "
                f"(lower --{split}-frames{f' or raise {cap_flag}' if cap_flag else ''})",
                field=f"--{split}-frames",
            )


def behaviour_rng(seed: int, game: str, episode: int) -> np.random.Generator:
    """The random stream of an episode's behaviour policy, apart from the emulator's own."""
    return np.random.default_rng(np.random.SeedSequence([episode_seed(seed, game, episode), 1]))


def sample(p: np.ndarray, rng: np.random.Generator) -> int:
    return min(int(np.searchsorted(np.cumsum(p), rng.random(), side="right")), len(p) - 1)


Behaviour = Callable[[Decision, np.ndarray, np.random.Generator], int]


def epsilon_expert(epsilon: float) -> Behaviour:
    """With probability ``epsilon`` a uniform random move, else a sample from the expert."""

    def behave(_d: Decision, expert_p: np.ndarray, rng: np.random.Generator) -> int:
        if rng.random() < epsilon:
            return int(rng.integers(len(expert_p)))
        return sample(expert_p, rng)

    return behave


def labelled_steps(
    game: AtariGame,
    expert: Expert,
    ale_seed: int,
    rng: np.random.Generator,
    behave: Behaviour,
    decision_cap: int | None,
    returns: bool = False,
    replay: dict | None = None,
) -> Iterator[Step]:
    """One episode played by ``behave``, every decision labelled by ``expert``.

    ``target`` is the expert's distribution (6 decimals), ``label`` its argmax, and the move played
    goes into ``provenance["played"]``. With ``returns``, provenance also gets the episode's final
    score and the return-to-go from each decision, filled in when the episode ends (the writer
    serialises provenance only when it finishes the game). ``replay`` gets the seed and every
    move of the episode, so that it can be replayed frame for frame.
    """
    expert.reset()
    current: dict = {}

    def choose(d: Decision) -> int:
        p = expert.probs(game)
        current["p"] = p
        return behave(d, p, rng)

    provenances = []
    for d, played in play_episode(game, ale_seed, choose, decision_cap):
        p = current["p"]
        prov: dict[str, float] = {"played": played}
        if returns:
            prov["score_before"] = game.score
            provenances.append(prov)
        yield Step(
            d.frame, label=int(np.argmax(p)), target=np.round(p, 6).tolist(), provenance=prov, after_fire=d.after_fire
        )
    for prov in provenances:
        prov["return_to_go"] = game.score - prov.pop("score_before")
        prov["episode_score"] = game.score
    if replay is not None:
        replay.update(seed=ale_seed, moves=list(game.moves), decisions=list(game.decisions))


def episode_steps(cfg: GenerateConfig, game: AtariGame, expert: Expert, episode: int, replay: dict) -> Iterator[Step]:
    """Episode ``episode`` of a generate run, played by the epsilon-expert and labelled by the expert,
    here or on a worker: its seeds come from (cfg.seed, game, episode) alone."""
    return labelled_steps(
        game,
        expert,
        episode_seed(cfg.seed, game.game, episode),
        behaviour_rng(cfg.seed, game.game, episode),
        epsilon_expert(cfg.epsilon_of(game.game)),
        cfg.decision_cap,
        replay=replay,
    )


#: ``episodes(first)``: (episode number, its steps, its replay) for first, first + 1, ... as the
#: writer asks for them; each replay is filled by the time its steps run out.
Episodes = Callable[[int], Generator[tuple[int, Iterable[Step], dict], None, None]]


def one_by_one(steps_for: Callable[[int, dict], Iterable[Step]]) -> Episodes:
    """Episodes played here, each when the writer asks for it."""

    def episodes(first: int) -> Generator[tuple[int, Iterable[Step], dict], None, None]:
        for n in itertools.count(first):
            replay: dict = {}
            yield n, steps_for(n, replay), replay

    return episodes


#: A val split plays at least one episode, however few its frames: generate's and DAgger's.
MIN_VAL_EPISODES = 1


def split_plan(train_frames: int, val_frames: int, min_train_episodes: int) -> list[tuple[str, int, int, int]]:
    """What ``fill_splits`` plays: each split's (name, first episode number, frames, min episodes)."""
    return [
        ("val", VAL_EPISODES_FROM, val_frames, MIN_VAL_EPISODES),
        ("train", TRAIN_EPISODES_FROM, train_frames, min_train_episodes),
    ]


def fill_splits(writer: GameWriter, episodes: Episodes, plan: list[tuple[str, int, int, int]], progress=None) -> None:
    """Play episodes into ``writer``: for each (split, first episode number, frames, min episodes),
    until the split has at least that many decisions to fill its cap, and that many episodes."""
    for split, first, frames, min_episodes in plan:
        played, i = 0, 0
        stream = episodes(first)
        try:
            while played < frames or i < min_episodes:
                n, steps, replay = next(stream)
                played += writer.add_episode(n, split, steps, replay=replay)
                i += 1
                if progress is not None:
                    progress.set_postfix_str(f"{split} episode {i}, {played} decisions")
        finally:
            stream.close()  # stops episodes played ahead that the split does not need
        if progress is not None:
            progress.update(1)


# -- episodes fanned out: a planner's decisions cost a quarter second each --------------------------

_PLAYERS: dict = {}  # per process: (game, expert, budget) -> (AtariGame, expert), built once


def _player(cfg: GenerateConfig, game_name: str) -> tuple[AtariGame, Expert]:
    key = (game_name, cfg.expert, cfg.planner_frames, cfg.decision_cap)
    if key not in _PLAYERS:
        expert = load_expert(cfg.expert, game_name, cfg.planner_frames)
        protocol = Protocol.ale_v5(game_name, decision_cap=cfg.decision_cap)
        _PLAYERS[key] = (AtariGame(game_name, protocol, keep=getattr(expert, "frames", None)), expert)
    return _PLAYERS[key]


def _labelled_episode(args: tuple[GenerateConfig, str, int]) -> tuple[list[tuple], dict]:
    """One labelled episode without its frames (the writer's process replays them): a task."""
    cfg, game_name, episode = args
    game, expert = _player(cfg, game_name)
    replay: dict = {}
    rows = [(s.label, s.target, s.provenance, s.after_fire) for s in episode_steps(cfg, game, expert, episode, replay)]
    return rows, replay


def _expert_baseline_episode(args: tuple[GenerateConfig, str, int]) -> tuple[float, float]:
    cfg, game_name, i = args
    game, expert = _player(cfg, game_name)
    expert.reset()
    return _scores(game, episode_seed(cfg.seed, game_name, EXPERT_BASELINE_FROM + i), _greedy(game, expert), cfg)


def played_ahead(cfg: GenerateConfig, game: AtariGame) -> Episodes:
    """Episodes played ``cfg.workers`` at a time on processes or Ray; here, each is replayed from its
    moves for its frames, so the writer gets the same steps, in the same order, as one by one."""

    def episodes(first: int) -> Generator[tuple[int, Iterable[Step], dict], None, None]:
        tasks = ((cfg, game.game, n) for n in itertools.count(first))
        with ahead(_labelled_episode, tasks, executor=cfg.executor, workers=cfg.workers) as results:
            for n, (rows, replay) in zip(itertools.count(first), results):
                frames = game.replay(replay["seed"], replay["moves"], replay["decisions"])
                steps = (
                    Step(frame, label=label, target=target, provenance=prov, after_fire=after_fire)
                    for (label, target, prov, after_fire), frame in zip(rows, frames, strict=True)
                )
                yield n, steps, replay

    return episodes


def by_episode(cfg: GenerateConfig) -> bool:
    """Whether ``--workers``/``--executor ray`` fan out episodes (a planner) rather than games."""
    return is_planner(cfg.expert) and (cfg.workers > 1 or cfg.executor == "ray")


def _greedy(game: AtariGame, expert: Expert) -> Callable[[Decision], int]:
    return lambda _d: int(np.argmax(expert.probs(game)))


def _scores(game: AtariGame, seed: int, choose: Callable[[Decision], int], cfg: GenerateConfig) -> tuple[float, float]:
    """An episode's final score (up to the decision cap) and its score after BASELINE_CAP decisions."""
    at_cap = None
    for d, _ in play_episode(game, seed, choose, cfg.decision_cap):
        if d.step == BASELINE_CAP:
            at_cap = game.score
    return game.score, game.score if at_cap is None else at_cap


def measure_baselines(game: AtariGame, expert: Expert, cfg: GenerateConfig, fanned: bool = False) -> dict:
    """Greedy-expert and uniform-random scores over ``baseline_episodes`` each: the final score
    (up to the decision cap) and the score after the first 4,500 decisions, per episode. With
    ``fanned``, the expert's episodes are played on cfg's workers or Ray (same scores)."""
    rng = behaviour_rng(cfg.seed, game.game, RANDOM_BASELINE_FROM)
    n = len(game.actions)
    out: dict = {"expert": expert_id(cfg.expert, cfg.planner_frames)}
    episodes = range(cfg.baseline_episodes)
    if fanned:
        from atari_data.produce.executors import fan_out

        tasks = [(cfg, game.game, i) for i in episodes]
        expert_runs = fan_out(
            _expert_baseline_episode, tasks, executor=cfg.executor, workers=cfg.workers, unit="episode"
        )
    else:
        expert_runs = []
        for i in episodes:
            expert.reset()
            seed = episode_seed(cfg.seed, game.game, EXPERT_BASELINE_FROM + i)
            expert_runs.append(_scores(game, seed, _greedy(game, expert), cfg))
    random_runs = [
        _scores(game, episode_seed(cfg.seed, game.game, RANDOM_BASELINE_FROM + i), lambda _d: int(rng.integers(n)), cfg)
        for i in episodes
    ]
    for who, runs in (("expert", expert_runs), ("random", random_runs)):
        full, capped = [r[0] for r in runs], [r[1] for r in runs]
        out[score_key(who)] = round(float(np.mean(full)), 4)
        out[scores_key(who)] = full
        if cfg.decision_cap is None or cfg.decision_cap >= BASELINE_CAP:  # else they would not be capped scores
            out[score_key(who, BASELINE_CAP)] = round(float(np.mean(capped)), 4)
            out[scores_key(who, BASELINE_CAP)] = capped
    out["protocol"] = game.protocol.to_dict()
    return out


def _reusable_baselines(cfg: GenerateConfig, game: str) -> dict | None:
    """The baselines another expert source already measured with the same expert, seed, episodes and cap."""
    for other in (s for s in SOURCES if s != cfg.source):
        g = GameDir(Path(cfg.root), other, game)
        if not g.ready:
            continue
        meta = g.meta()
        b = meta.get("baselines") or {}
        if (
            b.get("expert") == expert_id(cfg.expert, cfg.planner_frames)
            and meta.get("seed") == cfg.seed
            and len(b.get(scores_key("expert"), [])) == cfg.baseline_episodes
            and b.get("protocol", {}).get("decision_cap") == cfg.decision_cap
        ):
            return b
    return None


def generate_game(cfg: GenerateConfig, game_name: str, progress=None) -> dict | None:
    """Write one game; returns its meta.json, or None when it was already complete."""
    protocol = Protocol.ale_v5(game_name, decision_cap=cfg.decision_cap)
    with GameWriter(
        cfg.root,
        cfg.source,
        game_name,
        frame_format=ALE_FRAME_FORMAT,
        origin=f"atari-data generate, expert {expert_id(cfg.expert, cfg.planner_frames)}, "
        f"epsilon {cfg.epsilon_of(game_name)}",
        license="MIT",
        frames=SOURCES[cfg.source],
        caps={"train": cfg.train_frames, "val": cfg.val_frames},
        protocol=protocol,
        seed=cfg.seed,
        force=cfg.force,
    ) as writer:
        if writer.complete:
            held = len((writer.dir.meta().get("baselines") or {}).get(scores_key("expert"), []))
            if held != cfg.baseline_episodes:  # measured with the game, so a part of what it holds
                raise writer.held_otherwise("baselines", held, cfg.baseline_episodes)
            log.info("%s/%s is complete; skipping (use --force to redo)", cfg.source, game_name)
            return None
        expert = load_expert(cfg.expert, game_name, cfg.planner_frames)
        game = AtariGame(game_name, protocol, keep=getattr(expert, "frames", None))
        fanned = by_episode(cfg)

        def steps_for(episode: int, replay: dict) -> Iterator[Step]:
            return episode_steps(cfg, game, expert, episode, replay)

        fill_splits(
            writer,
            played_ahead(cfg, game) if fanned else one_by_one(steps_for),
            split_plan(cfg.train_frames, cfg.val_frames, cfg.min_train_episodes),
            progress,
        )
        baselines = None
        if cfg.baseline_episodes > 0:
            baselines = _reusable_baselines(cfg, game_name) or measure_baselines(game, expert, cfg, fanned)
        if progress is not None:
            progress.update(1)
        return writer.finish(baselines=baselines)


def _one(args) -> tuple[str, dict | None]:
    cfg, game = args
    return game, generate_game(cfg, game)


def generate(cfg: GenerateConfig, progress: bool = True) -> dict[str, dict | None]:
    """Generate every game of ``cfg``: in this process, a process pool (``workers``), or on Ray.

    Games are independent and each is written whole, so every executor gives the same bytes.
    """
    from tqdm import tqdm

    from atari_data.produce.executors import fan_out

    def here(args) -> tuple[str, dict | None]:
        c, g = args
        with tqdm(total=3, desc=f"{c.source}/{g}", unit="stage", disable=None if progress else True) as bar:
            return g, generate_game(c, g, bar)

    games = list(dict.fromkeys(cfg.games))  # Pong,Pong is one game, not two writers of one folder
    if by_episode(cfg):  # each game's episodes fan out instead, from this process
        return dict(here((cfg, g)) for g in games)
    return dict(
        fan_out(
            _one,
            [(cfg, g) for g in games],
            executor=cfg.executor,
            workers=cfg.workers,
            here=here,
            progress=progress,
            desc=cfg.source,
        )
    )
