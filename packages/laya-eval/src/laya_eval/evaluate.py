"""A whole evaluation: every game, its random baseline, normalised scores, flags and a summary.

The results file is rewritten (atomically) after every game. Running the same command again
skips the games already scored; running it with other settings is refused unless restarted,
so a file never mixes two protocols.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import types
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from laya_eval import __version__
from laya_eval.baselines import (
    CAP_FLAG,
    EXCLUDED,
    REFERENCE,
    Baseline,
    atari57,
    choose_baseline,
    disagreement,
    flags_for,
    normalise,
    read_meta_baselines,
    spread_problem,
)
from laya_eval.batch import MAX_IDENTITY, SAID
from laya_eval.errors import EvalError
from laya_eval.games import resolve_game
from laya_eval.jsonfile import SCORE_LIMIT, is_number, json_flag, numbers, read_json, replace_file
from laya_eval.policies import (
    POLICY_TIMEOUT,
    RandomPolicy,
    constant_button,
    kwargs_problem,
    load_policy,
    timeout_problem,
)
from laya_eval.runner import Episodes, play
from laya_eval.stats import (
    ALPHA,
    BOOTSTRAPS,
    REPS,
    bootstrap_ci,
    iqm,
    mean_of_means,
    median_of_means,
    optimality_gap,
)
from laya_protocol.config import listed, option
from laya_protocol.errors import UnknownName, cause, one_line
from laya_protocol.files import file_above
from laya_protocol.games import ACTION_SETS, action_set, emulator, is_game
from laya_protocol.locks import FileLock
from laya_protocol.protocol import AUTO_FIRE_RULES, EVAL_DECISION_CAP, FRAME_CAP, Protocol
from laya_protocol.ray import EXECUTORS, executor_problem
from laya_protocol.seeds import EVAL_SEED_BASE, MAX_EPISODES, MAX_SEED, episodes_problem, seed_problem
from laya_protocol.wording import counted


def decision_cap(text: str) -> int | None:
    """A ``--cap``: a number of decisions, or ``none``."""
    return None if text.lower() == "none" else int(text)


@dataclass
class RunConfig:
    """What `laya-eval run` does; each field is one flag (``--field-name``)."""

    policy: str = option(
        help="NAME[:ARG] (entry point of group laya_eval.policies: random, noop, constant:ACTION, "
        "laya:CKPT, ...), module:attr (a factory), or cmd:COMMAND (stdio protocol)"
    )
    games: list[str] = option(help="ALE v5 game names, comma-separated")
    out: str = option("results.json", "results file")
    episodes: int = option(10, "per game")
    seed_base: int = option(EVAL_SEED_BASE, "episode i is seeded SEED_BASE+i")
    cap: int | None = option(
        EVAL_DECISION_CAP, f"decisions per episode, or 'none' for the full {FRAME_CAP:,} frames", parse=decision_cap
    )
    greedy: bool = option(True, cli=False)  # --greedy / --sample, a pair of switches
    policy_kwargs: dict = option(
        help="JSON object of keyword arguments for the policy factory", factory=dict, parse=json_flag, shown="{}"
    )
    action_set: str = option(
        "minimal",
        "the buttons a policy chooses among: each game's minimal set, or all 18 (Machado et al., 2018)",
        choices=ACTION_SETS,
    )
    random_episodes: int = option(10, "episodes of the random baseline measured in this run, 0 for none")
    baselines: str | None = option(
        None,
        "expert/random baselines from dataset meta.json files: a file, an "
        "atari-data layout root, or a packed dataset repository",
    )
    threads: int = option(0, "emulator threads, 0 for one per core")
    timeout: float = option(POLICY_TIMEOUT, "seconds a cmd: policy may take per call before it is killed")
    executor: str = option(
        "local", "ray plays games as Ray tasks (RAY_ADDRESS, else a local instance)", choices=EXECUTORS
    )
    restart: bool = option(False, "overwrite a results file made with other settings")
    bootstrap: str = option(
        "episode",
        "confidence intervals: resample episodes within each game, or games too (rliable's task bootstrap)",
        choices=BOOTSTRAPS,
    )

    def __post_init__(self):
        """Every flag checked before anything is played: one line naming the flag."""
        listed(self)
        if isinstance(self.policy, str) and self.policy.startswith(OBJECT):  # a results file's name for one
            raise EvalError(
                f"{self.policy[:80]}: an object policy is played from Python (RunConfig(policy=obj)); its "
                "name in a results file loads nothing",
                field="--policy",
            )
        if not isinstance(self.policy, str):  # a policy object, from Python: played as it is
            if isinstance(self.policy, type):
                raise EvalError(
                    f"{self.policy.__name__} is a class: give the policy, an object of it", field="--policy"
                )
            if not callable(self.policy):
                raise EvalError(
                    f"a {type(self.policy).__name__} is not a policy spec (random, module:attr, cmd:COMMAND, ...) "
                    "nor a policy (a callable taking a Batch)",
                    field="--policy",
                )
            if self.policy_kwargs:
                raise EvalError("an object policy is made already: its arguments are its own", field="--policy-kwargs")
            if self.executor != "local":
                raise EvalError(
                    f"{self.executor} plays a policy named by its spec, which each task loads; an object stays "
                    "in this process",
                    field="--executor",
                )
        if not [g for g in self.games if g.strip()]:
            raise EvalError("no game given (expected comma-separated ALE names, e.g. Pong,Breakout)", field="--games")
        self.games = list(dict.fromkeys(resolve_game(g) for g in self.games))  # Pong,pong: one game
        for flag, episodes in (("--episodes", self.episodes), ("--random-episodes", max(self.random_episodes, 1))):
            if problem := episodes_problem(episodes):
                raise EvalError(problem, field=flag)
        problem = seed_problem(self.seed_base, max(self.episodes, self.random_episodes))
        if problem:
            raise EvalError(problem, field="--seed-base")
        if not isinstance(self.policy_kwargs, dict):
            raise EvalError(
                f"{json.dumps(self.policy_kwargs)[:80]} is a JSON {type(self.policy_kwargs).__name__}, "
                'expected an object such as {"device": "cuda"}',
                field="--policy-kwargs",
            )
        try:  # written into the results, which strict JSON readers must read
            json.dumps(self.policy_kwargs, allow_nan=False)
        except ValueError:
            raise EvalError("holds NaN or Infinity, which is not standard JSON", field="--policy-kwargs") from None
        if problem := timeout_problem(self.timeout):
            raise EvalError(problem, field="--timeout")
        if problem := kwargs_problem(self.spec, self.policy_kwargs):
            raise EvalError(problem, field="--policy-kwargs")
        if self.out.endswith(("/", os.sep)):  # Path drops the slash: a file would be written in the folder's place
            raise EvalError(f"{self.out} ends in a slash, as a folder does; expected a results file", field="--out")
        if self.cap is not None and self.cap < 1:
            raise EvalError(f"{self.cap} (expected at least 1 decision, or none)", field="--cap")
        for flag, value in (("--random-episodes", self.random_episodes), ("--threads", self.threads)):
            if value < 0:
                raise EvalError(f"{value} (expected 0 or more)", field=flag)
        if button := constant_button(self.spec):
            lacking = [g for g in self.games if button not in action_set(g, self.action_set)]
            if lacking:
                raise EvalError(
                    f"{button} is not a button of {', '.join(lacking)} in the {self.action_set} set "
                    f"(its actions: {', '.join(action_set(lacking[0], self.action_set))})",
                    field="--policy",
                )

    @property
    def spec(self) -> str:
        """The policy as a results file names it: its spec; for an object, the function it is (a
        partial's or a bound method's underneath) or its class, whose name another of them shares
        (a resume takes it for the same player unless its identity says otherwise)."""
        if isinstance(self.policy, str):
            return self.policy
        named = self.policy
        while isinstance(named, functools.partial):
            named = named.func
        named = getattr(named, "__func__", named)  # a bound method: its function, which names its class
        if not isinstance(named, (types.FunctionType, types.BuiltinFunctionType)):
            named = type(named)
        qualname = named.__qualname__
        if isinstance(self.policy, types.MethodType) or getattr(named, "__self__", None) is not None:
            qualname = qualname.rpartition(".")[0] or qualname  # Class.__call__ is the Class
        return f"{OBJECT}{named.__module__}.{qualname}"

    def settings(self) -> dict:
        """What a results file must have been made with to be resumed."""
        return {
            "policy": self.spec,
            "policy_kwargs": self.policy_kwargs,
            "episodes": self.episodes,
            "seed_base": self.seed_base,
            "cap": self.cap,
            "greedy": self.greedy,
            "random_episodes": self.random_episodes,
            "baselines": self.baselines,
            "action_set": self.action_set,
        }


def protocol_for(game: str, cap: int | None, action_set: str = "minimal") -> Protocol:
    return Protocol.ale_v5(game, decision_cap=cap, action_set=action_set)


def score_game(
    game: str,
    ep: Episodes,
    rnd: Episodes | None,
    baseline: Baseline | None,
    cap: int | None,
    action_set: str = "minimal",
) -> dict:
    """One game's entry of the results file."""
    rnd_mean = float(np.mean(rnd.scores)) if rnd is not None else None
    d = derived(game, ep.scores, baseline, cap, rnd_mean)
    result: dict[str, Any] = {
        "game": game,
        "error": ep.error,
        "scores": ep.scores,
        "mean": d["mean"],
        "std": d["std"],
        "steps": ep.steps,
        "capped": int(sum(ep.capped)),
        "actions": ep.actions,
        "seconds": ep.seconds,
        "protocol": protocol_for(game, cap, action_set).to_dict(),
        "rom_md5": emulator(game)["rom_md5"],
    }
    if rnd is not None:
        result["random"] = {"scores": rnd.scores, "mean": rnd_mean, "seconds": rnd.seconds}
    result["baseline"] = baseline.to_dict() if baseline else None
    result.update((k, v) for k, v in d.items() if k not in result)
    return result


def derived(
    game: str, scores: list[float], baseline: Baseline | None, cap: int | None, random_mean: float | None
) -> dict[str, Any]:
    """What a game's entry derives from its scores, its baseline, the run's cap and the mean of its
    random episodes: every field a report reads besides those. One home, for ``run`` writing a game
    and for ``load_results`` checking a file read back (an edited one cannot disagree with itself)."""
    x = np.asarray(scores, float)
    mean = float(x.mean())
    norm = normalise(mean, baseline)
    human = atari57().get(game)
    if random_mean is None and baseline is not None and baseline.cap == cap:  # another cap's random is no bar
        random_mean = baseline.random
    return {
        "mean": mean,
        "std": float(x.std()),
        "normalised": norm,
        "normalised_scores": [normalise(s, baseline) for s in scores] if norm is not None else None,
        "human_normalised": (mean - human[0]) / (human[1] - human[0]) if human else None,
        # None: no random score at this run's cap to beat, which is not a loss to random
        "beats_random": None if random_mean is None else bool(mean > random_mean),
        "flags": flags_for(game, norm, baseline, cap),
        "excluded": game in EXCLUDED,
    }


def scored_sets(games: dict[str, dict]) -> dict[str, list[dict]]:
    """The games each aggregate is over: ``all`` those with a normalised score (failed and excluded
    games left out), ``unflagged`` those of them no flag marks as not skill. The summary and the
    report's figures take them from here (compare's P(B > A), on raw scores, leaves out the same
    failed and excluded games, and keeps its own unflagged set: see compare)."""
    # by name: the bootstrap draws games in list order, and a Ray run records them as they finish
    ordered = sorted(games.values(), key=lambda g: g["game"])
    valued = [g for g in ordered if not g.get("error") and not g["excluded"] and g["normalised"] is not None]
    return {"all": valued, "unflagged": [g for g in valued if not g["flags"]]}


def summarise(games: dict[str, dict], seed: int = 0, bootstrap: str = "episode") -> dict:
    """Aggregates over scored games: excluded games and failed games are left out and counted."""
    ok = [g for g in games.values() if not g.get("error") and not g["excluded"]]
    sets = scored_sets(games)
    valued, unflagged = sets["all"], sets["unflagged"]
    out: dict[str, Any] = {
        "counts": {
            "games": len(games),
            "scored": len(ok),
            "with_normalised": len(valued),
            "unflagged": len(unflagged),
            "beats_random": sum(g["beats_random"] is True for g in ok),
            "random_unmeasured": sum(g["beats_random"] is None for g in ok),
        },
        "failed": sorted(g["game"] for g in games.values() if g.get("error")),
        "excluded": sorted(g["game"] for g in games.values() if g["excluded"]),
        "flagged": sorted(g["game"] for g in valued if g["flags"]),
        "intervals": _intervals({g["game"]: len(g["normalised_scores"]) for g in valued}, bootstrap),
    }
    capped = [g for g in valued if any(f.startswith(CAP_FLAG) for f in g["flags"])]
    if valued and not unflagged and capped:
        caps = sorted({str(g["baseline"]["cap"] or "none") for g in capped}, key=lambda c: (len(c), c))
        out["note"] = (
            f"no game is unflagged: the baselines of {len(capped)} of {len(valued)} games were measured with "
            f"a decision cap other than this run's (theirs: {', '.join(caps)}); run with --cap {caps[0]}"
            + (" (the cap of some of them)" if len(caps) > 1 else "")
            + ", or give --baselines measured at this cap"
        )
    stats = {
        "median": median_of_means,
        "mean": mean_of_means,
        "iqm": iqm,
        "optimality_gap": optimality_gap,
    }
    for name, subset in sets.items():
        per_game = [np.asarray(g["normalised_scores"], float) for g in subset]
        if not per_game:
            out[name] = None
            continue
        out[name] = {}
        for key, stat in stats.items():
            out[name][key] = stat(per_game)
            out[name][f"{key}_ci95"] = bootstrap_ci(stat, per_game, kind=bootstrap, seed=seed)
    return out


def _intervals(episodes: dict[str, int], bootstrap: str) -> dict:
    """How the intervals over games of these episode counts were made, and when they mean less than
    they seem to."""
    if bootstrap not in BOOTSTRAPS:
        raise EvalError(f"{bootstrap!r} (expected {' or '.join(BOOTSTRAPS)})", field="--bootstrap")
    out: dict[str, Any] = {"bootstrap": bootstrap, "confidence": 1 - ALPHA, "reps": REPS}
    warning = interval_warning(episodes, bootstrap)
    if warning:
        out["warning"] = warning
    return out


def interval_warning(episodes: dict[str, int], bootstrap: str) -> str | None:
    """Why intervals over games of these episode counts mean less than they seem to, or None."""
    if bootstrap == "task":
        return (
            f"{counted(len(episodes), 'game')}: too few to resample games meaningfully" if len(episodes) < 5 else None
        )
    single = [game for game, n in episodes.items() if n < 2]
    if not single:
        return None
    return (
        ("every game has" if len(single) == len(episodes) else f"{len(single)} games ({', '.join(single)}) have")
        + " one episode: the episode bootstrap has nothing to resample there, so the intervals "
        + ("are points, not uncertainty" if len(single) == len(episodes) else "understate the uncertainty")
        + "; play --episodes 2 or more, or use --bootstrap task"
    )


def write_results(path: Path, results: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)

    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(results, f, indent=1, allow_nan=False)  # standard JSON, readable by strict readers
            f.flush()
            os.fsync(f.fileno())

    try:
        replace_file(path, write)
    except ValueError as e:  # NaN or Infinity from a resumed file or --policy-kwargs: nothing is written
        raise EvalError(f"cannot be written as standard JSON ({cause(e, 80)})", file=str(path)) from None


RESULT_KEYS = ("settings", "protocol", "policy", "games", "summary")
OBJECT = "object:"  # how a results file names a policy object played from Python


def made(cfg: RunConfig):
    """The policy ``cfg`` names, loaded; or the object it holds, as it is."""
    if isinstance(cfg.policy, str):
        return load_policy(cfg.policy, cfg.policy_kwargs, timeout=cfg.timeout)
    return cfg.policy


#: The games the run that last wrote a results file was asked for and had not yet scored: empty once
#: it finished (a file written before the key was added has none).
PENDING = "pending"


def unfinished(results: dict) -> str | None:
    """What a results file's run had not yet scored, in words, or None when it finished."""
    pending = results.get(PENDING)
    if not pending:
        return None
    return (
        f"{counted(len(pending), 'game')} asked for {'is' if len(pending) == 1 else 'are'} not yet scored "
        f"({', '.join(pending)}): its run is still playing, or was stopped (its command, run again, plays "
        "only what is missing)"
    )


def _count(v) -> bool:
    return type(v) is int and v >= 1


#: The settings a results file must hold, each of the type `run` writes (reports print them as they are).
_SETTING_TYPES = (
    ("policy", lambda v: isinstance(v, str), "a policy name"),
    (
        "episodes",
        lambda v: type(v) is int and episodes_problem(v) is None,
        f"a count of episodes (1 to {MAX_EPISODES:,})",
    ),
    ("seed_base", lambda v: type(v) is int and 0 <= v <= MAX_SEED, f"an ALE seed (0 to {MAX_SEED:,})"),
    ("cap", lambda v: v is None or _count(v), "a decision cap (1 or more) or null"),
    ("greedy", lambda v: isinstance(v, bool), "true or false"),
)
#: Settings a results file holds since they were added; checked where present.
_LATER_SETTINGS = (
    (
        "random_episodes",
        lambda v: type(v) is int and 0 <= v <= MAX_EPISODES,
        f"a count of episodes (0 to {MAX_EPISODES:,})",
    ),
    ("action_set", lambda v: v in ACTION_SETS, f"an action set ({' or '.join(ACTION_SETS)})"),
)
#: A protocol's fields as run writes them (the file's; each game's adds its env_id), by what each holds.
_PROTOCOL_TYPES = {
    "repeat_action_probability": lambda v: type(v) in (int, float) and 0 <= v <= 1,
    "frameskip": lambda v: type(v) is int and 1 <= v <= FRAME_CAP,
    "action_set": lambda v: v in ACTION_SETS,
    "max_frames_per_episode": lambda v: type(v) is int and 1 <= v <= FRAME_CAP,
    "decision_cap": lambda v: v is None or (type(v) is int and v >= 1),
    "auto_fire": lambda v: v in AUTO_FIRE_RULES,
}
#: A file's protocol holds Protocol's fields but its env_id (each game's holds that too): a field added
#: there without its check here fails at import, not in a user's file.
_PROTOCOL_FIELDS = {f.name for f in fields(Protocol)} - {"env_id"}
assert set(_PROTOCOL_TYPES) == _PROTOCOL_FIELDS, "every field of Protocol has its check"


def _protocol_problem(protocol: dict, settings: dict) -> tuple[str, str] | None:
    """(field, what is wrong) with a results file's protocol, or None: its fields as run writes them,
    and the cap and action set its settings say (compare checks protocols: a file at odds with itself
    passed). A file from before settings held the action set says it in its protocol alone."""
    odd = sorted(set(protocol) ^ _PROTOCOL_FIELDS)
    if odd:
        return "protocol", f"holds {', '.join(repr(k)[:40] for k in odd[:3])}, not the fields run writes"
    for key, ok in _PROTOCOL_TYPES.items():
        if not ok(protocol[key]):
            return f"protocol.{key}", f"{protocol[key]!r:.60} is not as run writes it"
    if protocol["decision_cap"] != settings["cap"]:
        return "protocol.decision_cap", f"{protocol['decision_cap']} is not the settings' cap, {settings['cap']}"
    if settings.get("action_set", protocol["action_set"]) != protocol["action_set"]:
        return "protocol.action_set", f"{protocol['action_set']} is not the settings' {settings['action_set']}"
    return None


def load_results(path: str | Path, bootstrap: str | None = None) -> dict:
    results = read_json(path, what="a laya-eval results file")
    missing = [k for k in RESULT_KEYS if not isinstance(results, dict) or k not in results]
    if missing:
        raise EvalError(f"is not a laya-eval results file (missing {', '.join(missing)})", file=str(path))
    if not isinstance(results["games"], dict):
        raise EvalError("is not a mapping of game names to results", file=str(path), field="games")
    settings, protocol = results["settings"], results["protocol"]
    if not isinstance(settings, dict) or not {key for key, _, _ in _SETTING_TYPES} <= set(settings):
        raise EvalError(
            f"is not the settings laya-eval writes ({', '.join(key for key, _, _ in _SETTING_TYPES)})",
            file=str(path),
            field="settings",
        )
    for key, ok, what in _SETTING_TYPES:
        if not ok(settings[key]):
            raise EvalError(f"{settings[key]!r:.60} is not {what}", file=str(path), field=f"settings.{key}")
    for key, ok, what in _LATER_SETTINGS:
        if key in settings and not ok(settings[key]):
            raise EvalError(f"{settings[key]!r:.60} is not {what}", file=str(path), field=f"settings.{key}")
    if not isinstance(protocol, dict):
        raise EvalError("is not a mapping", file=str(path), field="protocol")
    if wrong := _protocol_problem(protocol, settings):
        raise EvalError(wrong[1], file=str(path), field=wrong[0])
    for key in ("date", "laya_eval"):  # printed in the report as they are
        if key in results and not (isinstance(results[key], str) and len(results[key]) <= 100):
            raise EvalError(f"{results[key]!r:.60} is not as run writes it (text)", file=str(path), field=key)
    played = results["policy"]  # what was played, as run writes it: a resumed run adds its identity
    if not (
        isinstance(played, dict)
        and isinstance(played.get("spec"), str)
        and isinstance(played.get("kwargs", {}), dict)
        and isinstance(played.get("identity", {}), dict)
    ):
        raise EvalError("is not the record run writes ({spec, kwargs, identity})", file=str(path), field="policy")
    emu = results.get("emulator", {})
    if not isinstance(emu, dict) or not all(isinstance(v, str) for v in emu.values()):
        raise EvalError("is not a mapping of names to versions", file=str(path), field="emulator")
    pending = results.get(PENDING, [])
    if not (
        isinstance(pending, list)
        and all(isinstance(g, str) and is_game(g) for g in pending)
        and len(set(pending)) == len(pending)
    ):
        raise EvalError("is not a list of ALE games, each once", file=str(path), field=PENDING)
    games = results["games"]
    if scored := [g for g in pending if isinstance(games.get(g), dict) and not games[g].get("error")]:
        raise EvalError(
            f"names {scored[0]}, which is scored (only a failed game is played again)", file=str(path), field=PENDING
        )
    summary = results["summary"]
    intervals = summary.get("intervals", {}) if isinstance(summary, dict) else None
    if not isinstance(intervals, dict) or intervals.get("bootstrap", "episode") not in BOOTSTRAPS:
        raise EvalError(
            f"is not a summary laya-eval writes (intervals.bootstrap: {' or '.join(BOOTSTRAPS)})",
            file=str(path),
            field="summary",
        )
    for name, g in results["games"].items():
        problem = _game_problem(name, g)
        if problem:
            raise EvalError(problem, file=str(path), field=f"games.{name}")
        wrong = _derived_problem(name, g, settings) or _played_problem(g, protocol, settings)
        if wrong:
            raise EvalError(wrong[1], file=str(path), field=f"games.{name}.{wrong[0]}")
    kind = intervals.get("bootstrap", "episode")
    results["summary"] = summarise(results["games"], bootstrap=bootstrap or kind)  # recomputed: games are the record
    return results


def _game_problem(name: str, g) -> str | None:
    """What is wrong with one game's entry of a results file (as score_game writes it), or None."""
    if not isinstance(g, dict) or g.get("game") != name or not (name.isascii() and name.isalnum()):
        return "is not a game result naming its game (an ALE name)"
    if not is_game(name):  # it would count in every aggregate
        return "is not an ALE game this ale-py ships"
    if g.get("error") is not None:  # a failed game: its reason, and whether it was excluded
        if not (isinstance(g["error"], str) and g["error"]):
            return "error is not a reason"
        return None if type(g.get("excluded")) is bool else "excluded: not as laya-eval writes it"
    b, rnd = g.get("baseline"), g.get("random", {})
    checks = {
        "mean": is_number(g.get("mean"), SCORE_LIMIT),
        "std": is_number(g.get("std"), SCORE_LIMIT),
        "scores": numbers(g.get("scores"), SCORE_LIMIT) and bool(g.get("scores")),
        "normalised": g.get("normalised") is None or is_number(g.get("normalised")),
        "normalised_scores": g.get("normalised") is None
        or (numbers(g.get("normalised_scores")) and len(g["normalised_scores"]) == len(g.get("scores") or ())),
        "human_normalised": g.get("human_normalised") is None or is_number(g.get("human_normalised")),
        "baseline": b is None
        or (
            isinstance(b, dict)
            and is_number(b.get("expert"), SCORE_LIMIT)
            and is_number(b.get("random"), SCORE_LIMIT)
            and (b.get("cap") is None or type(b.get("cap")) is int)
        ),
        "random": isinstance(rnd, dict) and (rnd.get("mean") is None or is_number(rnd.get("mean"), SCORE_LIMIT)),
        "excluded": type(g.get("excluded")) is bool,
        "beats_random": g.get("beats_random") is None or type(g.get("beats_random")) is bool,
        "flags": isinstance(g.get("flags"), list) and all(isinstance(f, str) for f in g["flags"]),
    }
    bad = [k for k, ok in checks.items() if not ok]
    return f"{', '.join(bad)}: not as laya-eval writes them" if bad else None


def _derived_problem(name: str, g: dict, settings: dict) -> tuple[str, str] | None:
    """(field, what is wrong) where a game's entry does not follow from its scores and baseline as
    ``derived`` gives it (the summary is recomputed from these fields, so they must be the games'),
    or None. Checked after ``_game_problem``: the types are right."""
    if g.get("error") is not None:
        return _differs("excluded", g["excluded"], name in EXCLUDED)
    if len(g["scores"]) != settings["episodes"]:
        return "scores", f"holds {counted(len(g['scores']), 'episode')}; the settings say {settings['episodes']} a game"
    b, rnd = g["baseline"], g.get("random") or {}
    if b and (problem := spread_problem(b["expert"], b["random"])):
        return "baseline", f"expert and random: {problem}"
    if b and (problem := _quoted_problem(name, b)):
        return "baseline", problem
    if "scores" in rnd:
        if not (numbers(rnd["scores"], SCORE_LIMIT) and rnd["scores"]):
            return "random", "scores: not as laya-eval writes them"
        wrong = _differs("random", rnd.get("mean"), float(np.mean(rnd["scores"])))
        if wrong:
            return wrong
    baseline = Baseline(b["expert"], b["random"], str(b.get("source", "")), b.get("cap")) if b else None
    want = derived(name, g["scores"], baseline, settings["cap"], rnd.get("mean"))
    for key, value in want.items():  # a key left out reads as null, as _game_problem reads it
        wrong = _differs(key, g.get(key), value)
        if wrong:
            return wrong
    return None


def _quoted_problem(name: str, b: dict) -> str | None:
    """Why a baseline that names the reference table is not that table's, or None: its name would
    vouch for numbers the table does not hold."""
    ref = REFERENCE.get(name)
    if b.get("source") not in {r.source for r in REFERENCE.values()}:
        return None
    if ref is None:
        return f"names the reference table, which has no {name}"
    quoted = (b["expert"], b["random"], b.get("cap"))
    if not _same(list(quoted), [ref.expert, ref.random, ref.cap]):
        return (
            f"names the reference table, which holds expert {ref.expert:g}, random {ref.random:g} at cap "
            f"{ref.cap} for {name}, not {b['expert']:g}, {b['random']:g} at cap {b.get('cap')}"
        )
    return None


def _played_problem(g: dict, protocol: dict, settings: dict) -> tuple[str, str] | None:
    """(field, what is wrong) where a played game's record is not what run writes for these settings
    and this protocol, or None."""
    if g.get("error") is not None:
        return None
    if "protocol" in g and not (
        isinstance(g["protocol"], dict) and {**g["protocol"], "env_id": None} == {**protocol, "env_id": None}
    ):
        return "protocol", "is not the file's protocol: the file is at odds with itself"
    steps = g.get("steps", [])
    if not (
        isinstance(steps, list)
        and len(steps) in (0, settings["episodes"])
        and all(type(n) is int and n >= 0 for n in steps)
    ):
        return "steps", "is not a count of decisions an episode"
    capped = g.get("capped", 0)
    if not (type(capped) is int and 0 <= capped <= settings["episodes"]):  # the report prints it
        return "capped", "is not a count of this game's episodes the cap cut"
    actions = g.get("actions", {})
    if not (
        isinstance(actions, dict) and all(isinstance(k, str) and type(n) is int and n >= 0 for k, n in actions.items())
    ):
        return "actions", "is not a count of decisions an action"
    if not is_number(g.get("seconds", 0.0), SCORE_LIMIT) or g.get("seconds", 0.0) < 0:
        return "seconds", "is not a duration"
    rnd = (g.get("random") or {}).get("scores", [])
    if isinstance(rnd, list) and len(rnd) > MAX_EPISODES:
        return "random", f"holds {len(rnd):,} scores; run plays at most {MAX_EPISODES:,} episodes a game"
    return None


def _differs(key: str, given: Any, want: Any) -> tuple[str, str] | None:
    if _same(given, want):
        return None
    return key, (
        f"{json.dumps(given)[:60]} does not follow from the game's scores and baseline, which give "
        f"{json.dumps(want)[:60]}: the file was edited, written by another tool, or by an earlier laya-eval "
        "whose rules differed (run it again with --restart)"
    )


def _same(a: Any, b: Any) -> bool:
    """Equal as a results file holds them: numbers to the last few digits (JSON keeps every digit of
    a float, but another machine's libm may round the last), lists element by element."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) in (int, float) and type(b) in (int, float):
        return bool(np.isclose(a, b, rtol=1e-9, atol=1e-12))
    return a == b


def play_game(
    cfg: RunConfig, game: str, policy=None, progress=None, extra: dict[str, list[Baseline]] | None = None
) -> dict:
    """Play and score one game (the unit of work any executor runs); ``extra`` holds the
    ``--baselines`` already read (read here when not given)."""
    own = policy is None
    if own:
        policy = made(cfg)
    try:
        proto = protocol_for(game, cfg.cap, cfg.action_set)
        ep = play(policy, game, proto, cfg.episodes, cfg.seed_base, cfg.greedy, threads=cfg.threads, progress=progress)
        rnd = None
        if cfg.random_episodes > 0 and ep.error is None:
            rnd = play(
                RandomPolicy(seed=cfg.seed_base), game, proto, cfg.random_episodes, cfg.seed_base, threads=cfg.threads
            )
    finally:
        if own:
            close_policy(policy)
    if extra is None and cfg.baselines:
        extra = read_meta_baselines(cfg.baselines)
    return score_game(game, ep, rnd, choose_baseline(game, cfg.cap, extra), cfg.cap, cfg.action_set)


def play_identified(cfg: RunConfig, game: str) -> tuple[dict, dict | None, str | None]:
    """One game played by a policy of its own (a Ray task's unit of work), with what the policy says
    it is, or why it could not say (as text: an EvalError does not cross Ray's pickling)."""
    policy = made(cfg)
    try:
        result = play_game(cfg, game, policy)
        try:
            return result, policy_identity(policy), None
        except EvalError as e:
            return result, None, e.message
    finally:
        close_policy(policy)


def close_policy(policy) -> None:
    """Call the policy's close(), if it has one; what it raises is a warning: the games are scored."""
    if policy is None or not hasattr(policy, "close"):
        return
    try:
        policy.close()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a third-party policy may raise anything
        print(f"warning: the policy's close() raised {cause(e)}", file=sys.stderr)


def policy_identity(policy) -> dict | None:
    """What the policy says it is (a non-empty ``identity`` mapping), as plain JSON; else None."""
    try:
        identity = getattr(policy, "identity", None)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - a property of a third-party policy may raise anything
        raise EvalError(cause(e), field="policy.identity") from None
    if not isinstance(identity, dict) or not identity:
        return None
    try:
        text = json.dumps(identity, allow_nan=False)  # as the results file writes it
    except (TypeError, ValueError, RecursionError) as e:
        raise EvalError(f"is not a JSON object of plain data ({cause(e, 80)})", field="policy.identity") from None
    if len(text) > MAX_IDENTITY:  # 24 MB of 'é' was a 72 MB results file, past what report and resume read
        raise EvalError(
            f"is {len(text):,} bytes as JSON, over the {MAX_IDENTITY >> 10} KB an identity may be",
            field="policy.identity",
        )
    return json.loads(text)


def writable(out: Path) -> None:
    """Refuse a results file that could not be written, before the first game is played (not after)."""
    import tempfile

    if out.is_dir():
        raise EvalError("is a folder, expected a results file path", file=str(out), field="--out")
    if above := file_above(out):
        raise EvalError(f"{above} is a file, not a folder", file=str(out), field="--out")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".probe"):
            pass
    except OSError as e:
        raise EvalError(f"cannot be written ({e.strerror or type(e).__name__})", file=str(out), field="--out") from None


def _same_emulator(old: dict, out: Path) -> None:
    """A results file is resumed only with the ale-py and the ROMs its games were scored with."""
    import ale_py

    then = (old.get("emulator") or {}).get("ale_py")
    if then != ale_py.__version__:
        raise EvalError(
            f"was scored with ale-py {then or '(not recorded)'}, this is {ale_py.__version__}; scores of two "
            "emulator versions are not one run: use --restart to overwrite it or --out for a new file",
            file=str(out),
            field="emulator",
        )
    for name, g in old["games"].items():
        try:
            now = emulator(name)["rom_md5"]
        except UnknownName:
            raise EvalError("is not an ALE game", file=str(out), field=f"games.{name}") from None
        if not g.get("error") and g.get("rom_md5") != now:
            raise EvalError(
                f"was scored with a ROM of MD5 {g.get('rom_md5') or '(not recorded)'}, this ale-py's is "
                f"{now}; use --restart or --out for a new file",
                file=str(out),
                field=f"games.{name}.rom_md5",
            )


def evaluate(cfg: RunConfig, progress: bool = True) -> dict:
    """Run every game not yet in ``cfg.out``; returns the results, as written. One run writes a
    results file at a time: a second is refused on one line instead of overwriting the first's games."""
    out = Path(cfg.out).absolute()  # a policy may change the working directory: the results stay here
    writable(out)
    with FileLock.beside(out, str(out), lambda m, f: EvalError(m, file=f, field="--out")):
        return _evaluate(cfg, out, progress)


def _evaluate(cfg: RunConfig, out: Path, progress: bool) -> dict:
    import datetime

    import ale_py
    from tqdm import tqdm

    results: dict[str, Any] = {
        "laya_eval": __version__,
        # what a score depends on besides the protocol; each game's entry has its ROM's MD5
        "emulator": {"ale_py": ale_py.__version__},
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "settings": cfg.settings(),
        "protocol": {k: v for k, v in protocol_for("Game", cfg.cap, cfg.action_set).to_dict().items() if k != "env_id"},
        "policy": {"spec": cfg.spec, "kwargs": cfg.policy_kwargs},
        "games": {},
        "summary": {},
    }
    if out.exists() and not cfg.restart:
        old = load_results(out, bootstrap=cfg.bootstrap)  # the summary as this run asks for it
        if old.get("settings") != cfg.settings():
            diff = sorted(k for k in cfg.settings() if (old.get("settings") or {}).get(k) != cfg.settings()[k])
            raise EvalError(
                f"was made with other settings ({', '.join(diff) or 'unreadable'}); use --restart to "
                "overwrite it or --out for a new file",
                file=str(out),
            )
        _same_emulator(old, out)
        results = old
    extra = read_meta_baselines(cfg.baselines) if cfg.baselines else None  # fail now, not after the first game
    todo = [g for g in cfg.games if g not in results["games"] or results["games"][g].get("error")]
    if results.get(PENDING, []) != todo and results["games"]:  # a file resumed (--restart replaces it after a game)
        # this run's asks, before its first game: a stop in it left the last run's word that it finished
        results[PENDING] = list(todo)
        write_results(out, results)
    for game in todo:
        note = disagreement(game, cfg.cap, extra)
        if note:
            print(f"warning: {note}", file=sys.stderr)

    recorded: list[str] = []

    def record(result: dict) -> None:
        recorded.append(result["game"])
        results["games"][result["game"]] = result
        # what this run was asked for and has not scored: a report read meanwhile, or after a stop, says so
        results[PENDING] = [g for g in todo if g not in recorded]
        results["summary"] = summarise(results["games"], bootstrap=cfg.bootstrap)
        write_results(out, results)

    player = Player(results, out)
    if cfg.executor == "ray":
        from laya_eval.executors import ray_each

        for result, identity, problem in ray_each(play_identified, [(cfg, g) for g in todo]):
            player.says(identity)  # each game's policy is closed before its task returns
            record(result)
            if problem:
                raise EvalError(problem, field="policy.identity")
        return results
    if problem := executor_problem(cfg.executor):
        raise EvalError(problem, field="--executor")
    given = not isinstance(cfg.policy, str)  # an object the caller made, and closes
    policy = made(cfg) if todo else None
    try:
        if policy is not None:  # another player's file is refused before a game is played, not after
            try:
                early = policy_identity(policy)
            except EvalError:  # an identity it cannot say is charged after its first game, as ever
                early = None
            player.says(early)
        for game in todo:
            with tqdm(total=cfg.episodes, desc=game, unit="episode", disable=None if progress else True) as bar:
                result = play_game(cfg, game, policy, bar, extra)
            problem = None
            try:
                identity = policy_identity(policy)
            except EvalError as e:
                identity, problem = None, e
            player.says(identity)
            record(result)  # the game is kept, whatever its identity says
            if problem:
                raise problem
    finally:
        if not given:
            close_policy(policy)
        if recorded:
            # Once more, now that the policy is gone: it lived on, as the same user, through the judge's
            # last write and the wait for it to exit, and could have replaced the file meanwhile.
            write_results(out, results)
    return results


class Player:
    """Who played a results file's games: one file, one player, as its games are otherwise not
    comparable. Checked against the file's player when it is resumed. Within one run the policy is
    the same command or factory, so an identity that changes (a process started again after a
    failure says its pid, a module's counts its games) is warned of once and the first kept."""

    def __init__(self, results: dict, out: Path):
        self.results, self.out, self.warned = results, out, False
        self.said: dict | None = None

    def says(self, identity: dict | None) -> None:
        if not identity:
            return
        if self.said is None:
            self._same(identity)
            self.said = identity
        elif identity != self.said and not self.warned:
            self.warned = True
            print(
                f"warning: the policy said another identity during this run "
                f"({one_line(json.dumps(identity))[:SAID]}); the results keep its first",
                file=sys.stderr,
            )

    def _same(self, identity: dict) -> None:
        """Record ``identity`` as the results' player, or refuse it. An identity that says all the
        recorded one said, and more (a checkpoint's fingerprint, which laya-policy added later), is the
        same player saying more."""
        then = self.results["policy"].get("identity")
        if then and identity != then and not then.items() <= identity.items():
            raise EvalError(
                f"the results hold games played by a policy that said it is {json.dumps(then)[:SAID]}; this "
                f"one says {json.dumps(identity)[:SAID]}: use --restart to overwrite them or --out for a new file",
                file=str(self.out),
                field="policy.identity",
            )
        self.results["policy"]["identity"] = identity
