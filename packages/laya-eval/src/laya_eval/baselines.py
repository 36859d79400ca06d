"""Baselines to normalise by, and the games whose normalised scores are not skill.

Three kinds of baseline, each kept with where it came from and under which decision cap:
  * the reference table: expert/random scores of the upstream CleanRL PPO experts (best of 9
    checkpoints a game, recorded in the project's reference notes; they need the Hub, so nothing here
    re-measures them), capped at 4,500 decisions (8 games). atari-data's ``builtin`` RAM experts are
    other, weaker players: their scores are in a dataset's meta.json, not here;
  * any dataset's meta.json baselines (`--baselines PATH`), read as plain JSON;
  * the Atari-57 random and professional-human scores (human-normalised scores, for reference).
A random baseline is also measured in every run, under the run's own protocol.
"""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from laya_eval.errors import EvalError
from laya_eval.jsonfile import SCORE_LIMIT, is_number, read_json
from laya_protocol.games import all_games
from laya_protocol.names import score_key
from laya_protocol.protocol import BASELINE_CAP, DATA_DECISION_CAP

#: The least spread between an expert's and random's scores that normalises (equal ones do not, and
#: are flagged): over 5e-324, a score of -20 normalised to -inf.
MIN_SPREAD = 1e-6


@dataclass(frozen=True)
class Baseline:
    expert: float | None
    random: float | None
    source: str
    cap: int | None  # decisions per episode it was measured with; None = the full 108,000 frames

    def to_dict(self) -> dict:
        return asdict(self)


# The upstream CleanRL PPO experts' scores with sticky actions, auto-FIRE and 4,500-decision episodes.
REFERENCE = {
    game: Baseline(expert, random, "reference table (upstream CleanRL PPO experts)", BASELINE_CAP)
    for game, expert, random in (
        ("Boxing", 92.4, 1.6),
        ("Freeway", 34.0, 0.0),
        ("Pong", 5.4, -20.2),
        ("Qbert", 24985.0, 185.0),
        ("MsPacman", 6092.0, 434.0),
        ("Breakout", 218.0, 1.2),
        ("SpaceInvaders", 8251.0, 125.0),
        ("Enduro", 379.6, 0.0),
    )
}

#: Left out of every summary, with the reason.
EXCLUDED = {"Solaris": "the expert scores below random"}

#: Kept in tables but marked, with the reason: their normalised scores are not skill.
FLAGGED = {
    "Skiing": "the expert only presses NOOP",
    "PrivateEye": "the expert is barely above random",
    "Pitfall": "the expert is barely above random",
    "MontezumaRevenge": "the expert is barely above random",
    "Tutankham": "the greedy expert gets stuck",
    "DoubleDunk": "stalling until the cap scores well",
    "Tennis": "stalling until the cap scores well",
}

NORMALISED_RANGE = (-0.5, 1.5)


@cache  # read once: every game's entry derives from it, when written and when a file is checked
def atari57() -> dict[str, tuple[float, float]]:
    """game -> (random, human) of the Atari-57 table (shared: not to be changed by a caller)."""
    text = resources.files("laya_eval").joinpath("data/atari57.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if not line.startswith("#"))
    return {r["game"]: (float(r["random"]), float(r["human"])) for r in rows}


def read_meta_baselines(path: str | Path) -> dict[str, list[Baseline]]:
    """Baselines from dataset meta.json files: a file, a layout root (<source>/<Game>/meta.json) or
    a packed repository (meta/<source>/<Game>.json). Both the capped and the uncapped ones."""
    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob("*/*/meta.json")) + sorted(path.glob("meta/*/*.json"))
    elif path.exists():
        raise EvalError("is not a file or a folder (a device? a FIFO?)", file=str(path), field="--baselines")
    else:
        raise EvalError("does not exist", file=str(path), field="--baselines")
    out: dict[str, list[Baseline]] = {}
    for f in files:
        meta = read_json(f, "--baselines", "a dataset meta.json")
        game = meta.get("game") if isinstance(meta, dict) else None
        b = meta.get("baselines") if isinstance(meta, dict) else None
        if not isinstance(game, str) or not (b is None or isinstance(b, dict)):
            raise EvalError(
                "is not a dataset meta.json (a game name and a baselines mapping)", file=str(f), field="--baselines"
            )
        if not b:
            continue
        if game not in all_games():  # looked up by its exact name: "pong" would be no game's, unsaid
            raise EvalError(f"game {game[:40]!r} is not an ALE v5 name", file=str(f), field="--baselines")
        bad = [k for k, v in b.items() if (k.endswith("_score") or "_score_cap" in k) and not is_number(v, SCORE_LIMIT)]
        bad += [k for k in ("protocol",) if k in b and not isinstance(b[k], dict)]
        if bad or (meta.get("protocol") is not None and not isinstance(meta.get("protocol"), dict)):
            raise EvalError(
                f"baselines {', '.join(bad) or 'protocol'}: not numbers within {SCORE_LIMIT:g} / a mapping",
                file=str(f),
                field="--baselines",
            )
        for cap in (None, BASELINE_CAP):
            e, r = b.get(score_key("expert", cap)), b.get(score_key("random", cap))
            if e is not None and r is not None and (problem := spread_problem(e, r)):
                raise EvalError(
                    f"baselines {score_key('expert', cap)} and {score_key('random', cap)}: {problem}",
                    file=str(f),
                    field="--baselines",
                )
        source = f"{f} ({b.get('expert', 'expert')})"
        found = out.setdefault(game, [])
        capped = (b.get(score_key("expert", BASELINE_CAP)), b.get(score_key("random", BASELINE_CAP)))
        if None not in capped:
            found.append(Baseline(*capped, source, BASELINE_CAP))
        full_cap = (b.get("protocol") or meta.get("protocol") or {}).get("decision_cap")
        if full_cap is not None and (type(full_cap) is not int or full_cap < 1):
            raise EvalError(
                f"protocol.decision_cap {str(full_cap)[:40]}: not a number of decisions (or null)",
                file=str(f),
                field="--baselines",
            )
        full = (b.get(score_key("expert")), b.get(score_key("random")))
        if None not in full:
            found.append(Baseline(*full, source, None if full_cap in (None, DATA_DECISION_CAP) else full_cap))
    if not out:
        raise EvalError("holds no meta.json with baselines", file=str(path), field="--baselines")
    return out


def spread_problem(expert: float, random: float) -> str | None:
    """Why an expert and a random score give no scale to normalise by, or None: equal ones give no
    normalised score (and are flagged), but ones apart by less than ``MIN_SPREAD`` give a huge one."""
    if expert != random and abs(expert - random) < MIN_SPREAD:
        return f"{expert:g} and {random:g} differ by less than {MIN_SPREAD:g}: no scale to normalise by"
    return None


def choose_baseline(game: str, cap: int | None, extra: dict[str, list[Baseline]] | None = None) -> Baseline | None:
    """The baseline to normalise ``game`` by: one measured under the run's cap if any exists
    (a dataset's before the built-in table), else any other (then flagged as another cap)."""
    candidates = list((extra or {}).get(game, [])) + ([REFERENCE[game]] if game in REFERENCE else [])
    for b in candidates:
        if b.cap == cap:
            return b
    return candidates[0] if candidates else None


def disagreement(game: str, cap: int | None, extra: dict[str, list[Baseline]] | None) -> str | None:
    """What to say when ``--baselines`` holds other baselines for ``game`` that ``choose_baseline``
    could have taken (the same cap as the one it took) with other scores; None when there are none."""
    chosen = choose_baseline(game, cap, extra)
    if chosen is None:
        return None
    others = [b for b in (extra or {}).get(game, []) if b.cap == chosen.cap and b != chosen]
    differ = [b for b in others if (b.expert, b.random) != (chosen.expert, chosen.random)]
    if not differ:
        return None
    kinds = {(chosen.expert, chosen.random)} | {(b.expert, b.random) for b in differ}
    return (
        f"--baselines holds {len(kinds)} different baselines for {game} at cap {chosen.cap or 'none'}: it uses "
        f"{chosen.source} ({chosen.expert:g} / {chosen.random:g}), not "
        + "; ".join(f"{b.source} ({b.expert:g} / {b.random:g})" for b in differ)
        + "; give --baselines the one to use"
    )


def normalise(score: float, b: Baseline | None) -> float | None:
    """(score - random) / (expert - random); None where the expert is not above random, whose
    ratio's sign says nothing of skill (the game is flagged, and aggregates leave it out)."""
    if b is None or b.expert is None or b.random is None or b.expert <= b.random:
        return None
    return (score - b.random) / (b.expert - b.random)


#: How a flag for baselines measured under another decision cap begins.
CAP_FLAG = "baselines measured with a cap of"


def flags_for(game: str, normalised: float | None, b: Baseline | None, cap: int | None) -> list[str]:
    """Every reason this game's normalised score should not be read as skill."""
    out = []
    if game in EXCLUDED:
        out.append(f"excluded: {EXCLUDED[game]}")
    if game in FLAGGED:
        out.append(FLAGGED[game])
    if b is None:
        out.append("no expert baseline")
    else:
        if b.expert is not None and b.random is not None and b.expert <= b.random:
            out.append(f"the expert ({b.expert:g}) is not above random ({b.random:g})")
        if b.cap != cap:
            out.append(f"{CAP_FLAG} {b.cap or 'none'}, this run {cap or 'none'}")
    lo, hi = NORMALISED_RANGE
    if normalised is not None and not lo <= normalised <= hi:
        out.append(f"normalised score {normalised:.2f} outside [{lo}, {hi}]")
    return out
