"""Two results files side by side: per-game scores and the probability that B improves on A.

P(B > A) is computed per game on raw episode scores (the chance an episode of B outscores one of
A, ties half) and averaged over games, as rliable's probability of improvement. Per game it is
invariant to any increasing rescaling, so it needs no normalisation, and two files normalised with
different baselines compare fairly. It is over the games both files scored, excluded games left
out, as a report's summary leaves them out; a second figure leaves out the games flagged for what
they are (``baselines.FLAGGED``: stalling scores, a NOOP expert), not those flagged for a baseline
or a normalised score, which P(B > A) never reads. What is left out is said. Files played under
different protocols (cap, action set, sticky actions, frameskip), another ale-py or other ROMs are
not one experiment and are refused.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from laya_eval.baselines import CAP_FLAG, FLAGGED
from laya_eval.errors import EvalError
from laya_eval.evaluate import interval_warning, load_results, unfinished
from laya_eval.report import md
from laya_eval.stats import CONFIDENCE, bootstrap_ci, probability_of_improvement
from laya_protocol.wording import counted


def compare(path_a: str, path_b: str, bootstrap: str = "episode") -> dict:
    ra, rb = load_results(path_a), load_results(path_b)
    pa, pb = ra["protocol"], rb["protocol"]  # mappings: load_results checked them
    if pa != pb:
        diff = sorted(k for k in set(pa) | set(pb) if pa.get(k) != pb.get(k))
        raise EvalError(
            "A and B were played under different protocols ("
            + ", ".join(f"{k}: {pa.get(k)} against {pb.get(k)}" for k in diff)
            + "); compare runs of one protocol",
            file=path_b,
            field="protocol",
        )
    ea, eb = ra.get("emulator", {}).get("ale_py"), rb.get("emulator", {}).get("ale_py")
    if ea != eb:
        raise EvalError(
            f"A was scored with ale-py {ea or '(not recorded)'}, B with {eb or '(not recorded)'}; "
            "compare runs of one emulator",
            file=path_b,
            field="emulator",
        )
    if not ra["games"].keys() & rb["games"].keys():
        raise EvalError(
            f"has no game in common with {path_a} (A: {', '.join(ra['games']) or 'none'}; "
            f"B: {', '.join(rb['games']) or 'none'}); compare runs of the same games",
            file=path_b,
            field="games",
        )
    rows: list[dict[str, Any]] = []
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    unflagged: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    episodes: dict[str, int] = {}
    left_out: dict[str, str] = {}
    for game in [g for g in ra["games"] if g in rb["games"]]:
        ga, gb = ra["games"][game], rb["games"][game]
        if not ga.get("error") and not gb.get("error") and ga.get("rom_md5") != gb.get("rom_md5"):
            raise EvalError(
                f"{game} was played on ROMs of different MD5 in A and B ({ga.get('rom_md5')} against "
                f"{gb.get('rom_md5')}); compare runs of one ROM",
                file=path_b,
                field=f"games.{game}.rom_md5",
            )
        failed = [side for side, g in (("A", ga), ("B", gb)) if g.get("error")]
        row: dict[str, Any] = {"game": game, "failed": " and ".join(failed) or None}
        if failed:
            left_out[game] = f"failed in {row['failed']}"
        if row["failed"] is None:
            same = ga.get("baseline") == gb.get("baseline")
            row.update(
                a=ga["mean"],
                b=gb["mean"],
                same_baseline=same,
                a_normalised=ga.get("normalised") if same else None,
                b_normalised=gb.get("normalised") if same else None,
                p=probability_of_improvement([gb["scores"]], [ga["scores"]]),
            )
            row["flagged"] = game in FLAGGED
            # normalised against baselines measured at another cap than the runs': shown, and marked
            row["other_cap"] = any(f.startswith(CAP_FLAG) for f in ga["flags"] + gb["flags"])
            if ga["excluded"] or gb["excluded"]:  # as the summary leaves it out
                left_out[game] = next((f for f in ga["flags"] + gb["flags"] if f.startswith("excluded")), "excluded")
            else:
                pairs[game] = (np.asarray(gb["scores"], float), np.asarray(ga["scores"], float))
                if not row["flagged"]:
                    unflagged[game] = pairs[game]
                episodes[game] = min(len(ga["scores"]), len(gb["scores"]))
        rows.append(row)
    out: dict[str, Any] = {
        "a": path_a,
        "b": path_b,
        "policies": {"A": ra["policy"]["spec"], "B": rb["policy"]["spec"]},
        # how each file's episodes were played, besides the protocol (checked above) and the policy
        "settings_differ": {
            k: (ra["settings"].get(k), rb["settings"].get(k))
            for k in PLAY_SETTINGS
            if ra["settings"].get(k) != rb["settings"].get(k)
        },
        "rows": rows,
        "bootstrap": bootstrap,
        "only_in": {
            "A": [g for g in ra["games"] if g not in rb["games"]],
            "B": [g for g in rb["games"] if g not in ra["games"]],
        },
        "left_out": left_out,
        "unfinished": {side: said for side, r in (("A", ra), ("B", rb)) if (said := unfinished(r))},
        "p": None,
        "unflagged": None,
    }
    if pairs:
        out.update(_improvement(pairs, bootstrap))
        out["warning"] = interval_warning(episodes, bootstrap)
    if unflagged:
        out["unflagged"] = _improvement(unflagged, bootstrap)
    return out


def _improvement(pairs: dict[str, tuple[np.ndarray, np.ndarray]], bootstrap: str) -> dict[str, Any]:
    """P(B > A) over games given as (B's scores, A's scores) by name, with its interval. The bootstrap
    draws them in name order, so the order a file holds its games in (a Ray run's is the order they
    finished) does not move the interval."""
    ordered = [pairs[game] for game in sorted(pairs)]
    xs, ys = [b for b, _ in ordered], [a for _, a in ordered]
    return {
        "p": probability_of_improvement(xs, ys),
        "p_ci95": bootstrap_ci(probability_of_improvement, xs, ys, kind=bootstrap),
        "games": len(pairs),
    }


#: Settings that make two files other experiments when they differ. The action set is the protocol's,
#: checked apart (a file an earlier laya-eval wrote has none in its settings).
PLAY_SETTINGS = ("greedy", "seed_base", "episodes", "random_episodes")


def decimals(a: float | None, b: float | None, fewest: int) -> int:
    """The fewest decimals, from ``fewest`` up to 6, that show two different numbers, and their
    difference, as different (10.04 and 10.06 at one decimal read 10.0, 10.1 and +0.0)."""
    d = fewest
    while a is not None and b is not None and a != b and d < 6 and (round(a, d) == round(b, d) or round(b - a, d) == 0):
        d += 1
    return d


def _said(setting) -> str:
    """A setting as its file holds it; one a file of an earlier laya-eval lacks is not recorded."""
    return "not recorded" if setting is None else json.dumps(setting)


def markdown(result: dict) -> str:
    policies = result.get("policies", {})
    lines = [
        f"A: {md(result['a'])} ({md(policies.get('A', '?'))})",
        f"B: {md(result['b'])} ({md(policies.get('B', '?'))})",
    ]
    lines += ["", "| game | A mean | B mean | B − A | P(B > A) | A normalised | B normalised | left out or marked |"]
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    differ = []
    for r in result["rows"]:
        if r["failed"]:
            lines.append(f"| {r['game']} | failed in {r['failed']} | | | | | | |")
            continue
        marks = ["excluded" if r["game"] in result["left_out"] else "flagged" if r["flagged"] else ""]
        marks.append("normalised with baselines at another cap" if r.get("other_cap") else "")
        d = decimals(r["a"], r["b"], 1)
        na, nb = r["a_normalised"], r["b_normalised"]
        fa, fb = ("—" if v is None else f"{v:.{decimals(na, nb, 3)}f}" for v in (na, nb))
        if not r["same_baseline"]:
            differ.append(r["game"])
        lines.append(
            f"| {r['game']} | {r['a']:.{d}f} | {r['b']:.{d}f} | {r['b'] - r['a']:+.{d}f} | {r['p']:.3f} | {fa} "
            f"| {fb} | {'; '.join(m for m in marks if m)} |"
        )
    if differ:
        lines.append(
            f"\nNormalised scores are not shown for {', '.join(differ)}: A and B were normalised with "
            "different baselines there. P(B > A) compares raw scores, so it is unaffected."
        )
    if result["p"] is not None:
        lo, hi = result["p_ci95"]
        how = "over episodes within each game" if result["bootstrap"] == "episode" else "over games and episodes"
        lines.append(
            f"\nP(B > A) = {result['p']:.3f} [{lo:.3f}, {hi:.3f}] over {counted(result['games'], 'game')} "
            f"(raw per-game scores; {CONFIDENCE} CI, {result['bootstrap']} bootstrap {how})"
        )
    u = result["unflagged"]
    if u is not None and u["games"] < result["games"]:
        lo, hi = u["p_ci95"]
        lines.append(
            f"Unflagged games: P(B > A) = {u['p']:.3f} [{lo:.3f}, {hi:.3f}] over {counted(u['games'], 'game')} "
            "(the games not flagged for what they are)"
        )
    gone = [f"{g} (only in {side})" for side in ("A", "B") for g in result["only_in"][side]]
    gone += [f"{g} ({why})" for g, why in result["left_out"].items()]
    if gone:
        lines.append(f"Left out of P(B > A): {'; '.join(gone)}.")
    if result.get("settings_differ"):
        shown = (f"{k} (A {_said(a)}, B {_said(b)})" for k, (a, b) in result["settings_differ"].items())
        lines.append(f"Settings that differ: {'; '.join(shown)}.")
    for side, said in result["unfinished"].items():
        lines.append(f"Not finished: {side}, {said}.")
    if result.get("warning"):
        lines.append(f"Warning: {result['warning']}.")
    return "\n".join(lines) + "\n"
