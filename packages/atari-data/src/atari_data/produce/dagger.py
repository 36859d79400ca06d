"""DAgger rounds: let a learner play, let the expert label what it saw.

:func:`write_dagger_round` plays a behaviour policy (any callable from frames to action
probabilities), labels every visited decision with an expert's distribution, and writes source
``dagger<N>`` through the shared writer: two-frame records whose provenance also carries the move
played, the return-to-go from that decision and the episode's score.

Episode numbers follow `generate`; ALE seeds come from (seed, game, ``seeds.dagger_episode(round,
episode)``), apart from every other role's (:mod:`laya_protocol.seeds`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import GameDir, OutputLock, list_games
from atari_data.layout.writer import GameWriter, Step
from atari_data.play.ale import AtariGame, Decision, PreviousFrame, episode_seed
from atari_data.play.experts import expert_id, load_expert
from atari_data.play.experts.base import check_holds, playable_games
from atari_data.play.experts.forms import EXPERT_FORMS
from atari_data.play.experts.planner import DEFAULT_FRAMES as PLANNER_FRAMES
from atari_data.play.experts.planner import check_budget
from atari_data.produce.generate import (
    behaviour_rng,
    check_counts,
    check_room,
    check_seed,
    fill_splits,
    labelled_steps,
    one_by_one,
    sample,
    split_plan,
)
from atari_data.publish.repo import check_out_root
from atari_data.schema import ALE_FRAME_FORMAT
from laya_protocol.choices import distribution
from laya_protocol.config import listed, option
from laya_protocol.protocol import EVAL_DECISION_CAP, Protocol
from laya_protocol.seeds import MAX_DAGGER_ROUND, dagger_episode, dagger_round_problem

#: ``policy(frames, game, actions) -> probabilities``: frames are [previous, current] uint8
#: 210x160x3 screens, the previous one a copy of the current on an episode's first decision and
#: after an auto-FIRE.
Policy = Callable[[list[np.ndarray], str, Sequence[str]], np.ndarray]


@dataclass
class DaggerConfig:
    """One DAgger round; each field is one flag of `laya-policy dagger`."""

    root: str = option(help="atari-data layout root to write into")
    round: int = option(help=f"round number N (source dagger<N>), 1 to {MAX_DAGGER_ROUND}")
    games: list[str] = option(help="comma-separated games")
    expert: str = option("builtin", EXPERT_FORMS)
    planner_frames: int = option(PLANNER_FRAMES, "a planner's emulator frames per decision, all rollouts together")
    train_frames: int = option(3_000, "train records per game at most")
    val_frames: int = option(150, "val records per game at most")
    min_train_episodes: int = option(2, "play at least this many train episodes")
    decision_cap: int | None = option(EVAL_DECISION_CAP, "decisions per episode at most")
    greedy: bool = option(False, "play the top action instead of sampling")
    seed: int = option(0, "seeds the moves the learner draws and the episodes it plays")
    force: bool = option(False, "rewrite games already written")

    def __post_init__(self):
        listed(self)
        check_out_root(self.root)
        check_counts(
            ("--train-frames", self.train_frames, 1),
            ("--val-frames", self.val_frames, 0),
            ("--min-train-episodes", self.min_train_episodes, 1),
            ("--decision-cap", 1 if self.decision_cap is None else self.decision_cap, 1),
        )
        check_seed(self.seed)
        plan = split_plan(self.train_frames, self.val_frames, self.min_train_episodes)
        check_room(plan, self.decision_cap, dagger=True)
        check_budget(self.planner_frames)
        check_holds(self.expert)
        self.games = playable_games(self.expert, self.games)


def policy_behaviour(policy: Policy, game: AtariGame, greedy: bool, learner: str = "a policy"):
    """Turn a frames-to-probabilities policy into a writer behaviour, keeping the two-frame rule; a
    move that is no distribution is one error naming the learner and the game."""
    previous = PreviousFrame()

    def behave(d: Decision, _expert_p, rng: np.random.Generator) -> int:
        before = previous(d)
        p = np.asarray(policy([before, d.frame], game.game, game.actions), dtype=np.float64)
        if p.shape != (len(game.actions),) or not np.isfinite(p).all() or (p < 0).any() or p.max() <= 0:
            raise AtariDataError(
                f"on {game.game} returned {p!r} for {len(game.actions)} actions "
                "(expected finite non-negative probabilities)",
                file=learner,
                field="policy",
            )
        return int(np.argmax(p)) if greedy else sample(distribution(p), rng)

    return behave


def write_dagger_round(cfg: DaggerConfig, policy: Policy, learner: str = "a policy") -> dict[str, dict | None]:
    """Write ``<root>/dagger<round>/<Game>`` for every game; returns each game's meta.json
    (None for games already complete). ``learner`` names the policy in each game's meta.json
    (its ``origin``, with greedy or sampled play): a round is one learner's, so a game of it that
    another wrote is refused rather than left beside this one's."""
    if problem := dagger_round_problem(cfg.round):  # before anything is played
        raise AtariDataError(problem, field="round")
    source = f"dagger{cfg.round}"
    played = f"{learner} ({'greedy' if cfg.greedy else 'sampled'})"
    origin = (
        f"atari-data DAgger round {cfg.round}, expert {expert_id(cfg.expert, cfg.planner_frames)}, learner {played}"
    )

    def refuse_another_players(name: str) -> None:
        done = GameDir(Path(cfg.root), source, name)
        if done.ready and (written := done.meta().get("origin")) != origin:
            named = "" if name in cfg.games else " with --games naming it"
            raise AtariDataError(
                f"{source}/{name} was written by another player ({written}); this command's is ({origin}): "
                f"pass --force{named} to redo it, or another --round",
                field="round",
            )

    # One process writes a round at a time (two at once on different games each found the other's
    # games not yet ready, and left a round of two players); every game of it, asked for or not, is
    # checked before any is played: a round is one player's, never left half another's. --force
    # redoes the games it names.
    Path(cfg.root).mkdir(parents=True, exist_ok=True)
    with OutputLock(Path(cfg.root) / source, f"DAgger round {cfg.round}"):
        for g in list_games(cfg.root, [source]):
            if not (cfg.force and g.game in cfg.games):
                refuse_another_players(g.game)
        return _write_games(cfg, policy, learner, source, origin)


def _write_games(cfg: DaggerConfig, policy: Policy, learner: str, source: str, origin: str) -> dict:
    out: dict[str, dict | None] = {}
    for name in cfg.games:
        protocol = Protocol.ale_v5(name, decision_cap=cfg.decision_cap)
        with GameWriter(
            cfg.root,
            source,
            name,
            frame_format=ALE_FRAME_FORMAT,
            frames=2,
            origin=origin,
            license="MIT",
            caps={"train": cfg.train_frames, "val": cfg.val_frames},
            protocol=protocol,
            seed=cfg.seed,
            force=cfg.force,
        ) as writer:
            if writer.complete:
                out[name] = None
                continue
            expert = load_expert(cfg.expert, name, cfg.planner_frames)
            game = AtariGame(name, protocol, keep=getattr(expert, "frames", None))
            behave = policy_behaviour(policy, game, cfg.greedy, learner)

            def steps_for(
                episode: int, replay: dict, name=name, game=game, expert=expert, behave=behave
            ) -> Iterator[Step]:
                seed_key = dagger_episode(cfg.round, episode)
                return labelled_steps(
                    game,
                    expert,
                    episode_seed(cfg.seed, name, seed_key),
                    behaviour_rng(cfg.seed, name, seed_key),
                    behave,
                    cfg.decision_cap,
                    returns=True,
                    replay=replay,
                )

            fill_splits(
                writer,
                one_by_one(steps_for),
                split_plan(cfg.train_frames, cfg.val_frames, cfg.min_train_episodes),
            )
            out[name] = writer.finish()
    return out
