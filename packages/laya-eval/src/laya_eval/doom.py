"""ViZDoom as a second platform: play any policy on a scenario and judge it (extra ``laya-eval[vizdoom]``).

The scenario, its screens, tics per decision and the labels-buffer expert are
:mod:`laya_protocol.doom`'s, shared with the data. The play loop is the judge's own (the data's is
separate on purpose, so each checks the other): the two-frame rule (the previous decision's screen;
a copy on the first decision), episode i seeded ``seed_base + i`` (default
``laya_protocol.seeds.EVAL_SEED_BASE``, apart from every range the data uses). The policy gets the
same ``Batch`` as on ALE, with ``platform="vizdoom"``. Baselines are measured in the same run on the
same seeds: the expert (which shoots when it sees no target), uniform random buttons and
always-ATTACK. Normalised = (policy - random) / (expert - random) on mean reward.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import numpy as np

from laya_eval import __version__
from laya_eval.baselines import Baseline, normalise
from laya_eval.batch import Batch, PolicyError, asked, choose
from laya_eval.errors import EvalError
from laya_eval.evaluate import close_policy, policy_identity, writable, write_results
from laya_eval.jsonfile import read_json
from laya_eval.policies import (
    POLICY_TIMEOUT,
    ConstantPolicy,
    RandomPolicy,
    constant_button,
    kwargs_problem,
    load_policy,
    timeout_problem,
)
from laya_eval.stdio import game_over
from laya_protocol import doom
from laya_protocol.doom import TICS_PER_DECISION, buttons, expert_button
from laya_protocol.errors import UnknownName
from laya_protocol.locks import FileLock
from laya_protocol.seeds import EVAL_SEED_BASE, episodes_problem, seed_problem
from laya_protocol.wording import counted


def make_game(scenario: str):
    try:
        return doom.make_game(scenario)
    except ImportError:
        raise EvalError("ViZDoom needs the vizdoom extra: pip install 'laya-eval[vizdoom]'") from None
    except UnknownName as e:
        raise EvalError(str(e), field="--scenario") from None


class ExpertPolicy:
    """The labels-buffer expert; it reads the game's state, so it only runs inside this module.
    Where the expert sees no target, the baseline shoots: a baseline must act on every decision."""

    def __init__(self, game):
        self.game = game

    def __call__(self, batch: Batch) -> np.ndarray:
        names = list(batch.actions)
        button = expert_button(self.game.get_state(), names, batch.frames.shape[2])
        return np.array([names.index("ATTACK") if button is None else button])


def play(policy, game, scenario: str, episodes: int, seed_base: int, greedy: bool = True) -> dict:
    """Play ``episodes`` episodes; per-episode rewards, kills and steps, and the action mix."""
    names = tuple(buttons(game))
    name = doom.game_name(scenario)
    if hasattr(policy, "reset"):
        asked(policy.reset, name, names, what="reset ")
    rng = np.random.default_rng(seed_base)
    rewards, kills, steps, mix = [], [], [], Counter[str]()
    for i in range(episodes):
        game.set_seed(seed_base + i)
        game.new_episode()
        prev, n = None, 0
        while not game.is_episode_finished():
            frame = np.ascontiguousarray(game.get_state().screen_buffer)
            before = frame if prev is None else prev
            batch = Batch(
                game=name,
                actions=names,
                frames=frame[None],
                prev_frames=before[None],
                new_episode=np.array([n == 0]),
                episodes=np.array([i]),
                platform="vizdoom",
            )
            action = int(choose(asked(policy, batch), batch, greedy, rng)[0])
            mix[names[action]] += 1
            game.make_action([j == action for j in range(len(names))], TICS_PER_DECISION)
            prev, n = frame, n + 1
        rewards.append(float(game.get_total_reward()))
        kills.append(bool(game.get_episode_time() < game.get_episode_timeout()))
        steps.append(n)
    game_over(policy)
    return {
        "mean": float(np.mean(rewards)),
        "std": float(np.std(rewards)),
        "kill_rate": float(np.mean(kills)),
        "steps": float(np.mean(steps)),
        "rewards": rewards,
        "actions": dict(mix),
    }


EPISODES, OUT = 50, "doom.json"  # `laya-eval doom`'s defaults


def evaluate_doom(
    policy_spec: str,
    scenario: str = doom.SCENARIO,
    episodes: int = EPISODES,
    seed_base: int = EVAL_SEED_BASE,
    greedy: bool = True,
    policy_kwargs: dict | None = None,
    out: str | None = None,
    timeout: float = POLICY_TIMEOUT,
) -> dict:
    """The policy and the three baselines on the same seeds; written to ``out`` when given."""
    if problem := timeout_problem(timeout):
        raise EvalError(problem, field="--timeout")
    if problem := episodes_problem(episodes):
        raise EvalError(problem, field="--episodes")
    if problem := seed_problem(seed_base, episodes):
        raise EvalError(problem, field="--seed-base")
    if policy_kwargs is not None and not isinstance(policy_kwargs, dict):
        raise EvalError(f"{json.dumps(policy_kwargs)[:80]} is not a JSON object", field="--policy-kwargs")
    if out is not None and not out.strip():
        raise EvalError("is empty; name the results file", field="--out")
    if problem := kwargs_problem(policy_spec, policy_kwargs):
        raise EvalError(problem, field="--policy-kwargs")
    path = Path(out).absolute() if out else None  # a policy may change the working directory: the results stay here
    if path is None:
        return _judged(policy_spec, scenario, episodes, seed_base, greedy, policy_kwargs, timeout)
    writable(path)  # before any episode is played, not after
    if path.is_file() and not path.is_symlink() and not _ours(path):
        raise EvalError(
            "is not a results file of laya-eval doom, and doom would replace it: move it, or give another --out",
            file=str(path),
            field="--out",
        )
    with FileLock.beside(path, str(path), lambda m, f: EvalError(m, file=f, field="--out")):
        results = _judged(policy_spec, scenario, episodes, seed_base, greedy, policy_kwargs, timeout)
        write_results(path, results)  # beside it, then renamed: a link or FIFO there is replaced
    return results


def _ours(path: Path) -> bool:
    """``path`` holds what doom writes (a file it may replace): plain JSON naming this platform."""
    try:
        held = read_json(path, what="a laya-eval doom results file")
    except EvalError:
        return False
    return isinstance(held, dict) and held.get("platform") == "vizdoom" and "results" in held


def _judged(
    policy_spec: str, scenario: str, episodes: int, seed_base: int, greedy: bool, policy_kwargs, timeout: float
) -> dict:
    """The baselines, then the policy, on one game; a policy that misbehaves leaves its row out and
    its error in ``error``, as `run` fails a game."""
    game = make_game(scenario)
    error = None
    try:
        names = buttons(game)
        if (button := constant_button(policy_spec)) and button not in names:
            raise EvalError(
                f"{button} is not a button of {doom.game_name(scenario)} (its buttons: {', '.join(names)})",
                field="--policy",
            )
        rows = {
            "expert": play(ExpertPolicy(game), game, scenario, episodes, seed_base),
            "random": play(RandomPolicy(seed=seed_base), game, scenario, episodes, seed_base),
            "always_attack": play(ConstantPolicy("ATTACK"), game, scenario, episodes, seed_base),
        }
        policy = load_policy(policy_spec, policy_kwargs, timeout)
        t = time.monotonic()
        try:
            rows["policy"] = play(policy, game, scenario, episodes, seed_base, greedy)
            rows["policy"]["seconds"] = round(time.monotonic() - t, 1)
        except PolicyError as e:
            error = str(e)
        try:  # what it says it is, kept with the results (at their top: a doom file names one policy)
            identity = policy_identity(policy)
        except EvalError as e:
            identity, error = None, error or f"policy.identity: {e.message}"
        finally:
            close_policy(policy)  # what it raises is a warning: the episodes are played
    finally:
        game.close()
    beside = Baseline(rows["expert"]["mean"], rows["random"]["mean"], "the expert and random, played beside it", None)
    import datetime

    import vizdoom

    results = {
        "laya_eval": __version__,
        "emulator": {"vizdoom": vizdoom.__version__},  # what a score depends on besides the settings
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "platform": "vizdoom",
        "scenario": scenario,
        "game": doom.game_name(scenario),
        "policy": policy_spec,
        "policy_kwargs": policy_kwargs or {},
        **({"identity": identity} if identity else {}),
        "episodes": episodes,
        "seed_base": seed_base,
        "greedy": greedy,
        "tics_per_decision": TICS_PER_DECISION,
        "results": rows,
        "normalised": None if error else normalise(rows["policy"]["mean"], beside),
    }
    if error:
        results["error"] = error
    return results


def markdown(results: dict) -> str:
    lines = [
        f"ViZDoom {results['scenario']}, {counted(results['episodes'], 'episode')} "
        f"(seeds from {results['seed_base']}), "
        f"{results['tics_per_decision']} tics per decision",
        "",
        "| policy | mean reward | kill rate | steps per episode | actions |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for name, r in results["results"].items():
        label = f"`{results['policy']}` (judged)" if name == "policy" else f"{name} (baseline)"
        mix = ", ".join(f"{k} {v}" for k, v in sorted(r["actions"].items()))
        lines.append(f"| {label} | {r['mean']:+.1f} | {r['kill_rate']:.0%} | {r['steps']:.1f} | {mix} |")
    norm = results["normalised"]
    lines += ["", f"Normalised (policy - random) / (expert - random): {'—' if norm is None else f'{norm:.3f}'}"]
    return "\n".join(lines) + "\n"
