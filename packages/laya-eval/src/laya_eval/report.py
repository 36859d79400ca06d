"""Results files as a markdown report and rliable-style figures.

    laya-eval report results.json                       # markdown to stdout
    laya-eval report a.json b.json --out report/        # report.md and the figures, every file on each

Figures: ``normalised.png`` (each game's normalised score with its interval, at
:data:`~laya_eval.stats.CONFIDENCE`; hatched bars are flagged games), ``aggregates.png`` (median,
IQM, mean and optimality gap with intervals, one row per file, as rliable draws them),
``profile.png`` (the performance profile as a step function with its band). ``laya-eval compare
A B --out DIR`` adds ``improvement.png``.
"""

from __future__ import annotations

import contextlib
import json
from functools import partial
from pathlib import Path

import numpy as np

from laya_eval.baselines import NORMALISED_RANGE
from laya_eval.errors import EvalError
from laya_eval.evaluate import scored_sets, unfinished
from laya_eval.jsonfile import put_in_place, replace_file, stage_file
from laya_eval.stats import CONFIDENCE, bootstrap_ci, mean_of_means, performance_profile
from laya_protocol.errors import visible
from laya_protocol.locks import FileLock
from laya_protocol.wording import counted

AGGREGATES = (
    ("median", "median normalised"),
    ("iqm", "IQM"),
    ("mean", "mean normalised"),
    ("optimality_gap", "optimality gap (lower is better)"),
)


#: What the human-normalised column is measured against, said under every table that shows it.
HUMAN_NOTE = (
    "Human-normalised: against the Atari-57 random and professional-human scores, measured with up to "
    "108,000 frames an episode, 1-30 no-op starts and no sticky actions, so a reference only, not this "
    "protocol's."
)


def _fmt(x, digits=3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def md(x) -> str:
    """Text from a results file as Markdown shows it: one line, HTML as text, no table cell or code
    span broken, no link or emphasis made (a policy name or an error could write a heading, a script,
    table rows or a link), and what a terminal acts on (an escape sequence, a bidi override) escaped."""
    text = visible(" ".join(str(x).split()))
    for raw, shown in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")):
        text = text.replace(raw, shown)
    # '_' inside a word makes no emphasis (CommonMark), so a file name like run_1.json stays as typed
    inner = {i for i in range(1, len(text) - 1) if text[i] == "_" and text[i - 1].isalnum() and text[i + 1].isalnum()}
    return "".join("\\" + c if c in "\\|`*_[]~" and i not in inner else c for i, c in enumerate(text))


def tex(x, width: int = 60, keep_end: bool = False) -> str:
    """Text from a results file as a figure draws it: at most ``width`` characters (a longer name
    leaves no room for the axes; ``keep_end`` keeps its end, where two file names differ), and a '$'
    a dollar sign, not matplotlib's mathtext (which raised on a name such as 'x$\\frac{1}$y')."""
    text = visible(str(x))
    if len(text) > width:
        text = "…" + text[1 - width :] if keep_end else text[: width - 1] + "…"
    return text.replace("$", r"\$")


def markdown(results: dict) -> str:
    s = results["settings"]
    emu = results.get("emulator") or {}
    lines = [
        f"# Evaluation of {md(s['policy'])}" + (f" ({md(results['_file'])})" if results.get("_file") else ""),
        "",
        f"{counted(s['episodes'], 'episode')} per game, seeds from {s['seed_base']}, "
        f"decision cap {s['cap'] or 'none'}, "
        f"{'greedy' if s['greedy'] else 'sampled'} actions; protocol: "
        + ", ".join(f"{k} {v}" for k, v in results["protocol"].items())
        + (f"; ale-py {md(emu['ale_py'])}" if emu.get("ale_py") else "")
        + (f", laya-eval {md(results['laya_eval'])}" if results.get("laya_eval") else "")
        + (f", {md(results['date'])}" if results.get("date") else "")
        + ".",
        _played(results),
        "",
        "| game | score (mean ± std) | random (this run) | expert / random baseline | normalised | "
        "human-normalised | flags |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for g in results["games"].values():
        if g.get("error"):
            lines.append(f"| {g['game']} | failed: {md(g['error'])} | | | | | |")
            continue
        b = g["baseline"]
        base = f"{b['expert']:g} / {b['random']:g} (cap {b['cap'] or 'none'})" if b else "—"
        rnd = _fmt(g.get("random", {}).get("mean"), 1)
        capped = f" ({g['capped']} of {len(g['scores'])} cut at the cap)" if g.get("capped") else ""
        lines.append(
            f"| {g['game']} | {g['mean']:.1f} ± {g['std']:.1f}{capped} | {rnd} | {base} | {_fmt(g['normalised'])} | "
            f"{_fmt(g['human_normalised'])} | {md('; '.join(g['flags']))} |"
        )
    sources: dict[str, list[str]] = {}
    for g in results["games"].values():
        if not g.get("error") and g["baseline"]:
            sources.setdefault(md(g["baseline"].get("source") or "(not recorded)"), []).append(g["game"])
    if sources:
        lines += ["", "Baselines: " + "; ".join(f"{', '.join(games)}: {src}" for src, games in sources.items()) + "."]
    if any(not g.get("error") and g.get("human_normalised") is not None for g in results["games"].values()):
        lines.append(HUMAN_NOTE)
    sm = results["summary"]
    lines += ["", "| summary | all games with a normalised score | unflagged games |", "| --- | ---: | ---: |"]
    for key, label in AGGREGATES:
        row = []
        for part in ("all", "unflagged"):
            v = sm.get(part)
            if v is None:
                row.append("—")
            elif f"{key}_ci95" in v:
                lo, hi = v[f"{key}_ci95"]
                row.append(f"{v[key]:.3f} [{lo:.3f}, {hi:.3f}]")
            else:
                row.append(f"{v[key]:.3f}")
        lines.append(f"| {label} | {row[0]} | {row[1]} |")
    n = sm["counts"]
    iv = sm.get("intervals") or {"bootstrap": "episode"}
    how = {
        "episode": "stratified bootstrap over episodes within each game (the games are fixed)",
        "task": "task bootstrap over games and the episodes within them (rliable's; it includes the choice of games)",
    }[iv["bootstrap"]]
    lines += [
        "",
        f"Beats random in {n['beats_random']} of {counted(n['scored'], 'game')}"
        + (
            f" ({n['random_unmeasured']} with no random score at this cap to beat)"
            if n.get("random_unmeasured")
            else ""
        )
        + f". Games: {n['games']}, "
        f"with a normalised score: {n['with_normalised']}, unflagged: {n['unflagged']}"
        + (f", failed: {', '.join(sm['failed'])}" if sm["failed"] else "")
        + (f", excluded: {', '.join(sm['excluded'])}" if sm["excluded"] else "")
        + ".",
        f"Confidence intervals: {CONFIDENCE}, {how}.",
    ]
    if lacking := unfinished(results):
        lines.append(f"Not finished: {lacking}.")
    if iv.get("warning"):
        lines.append(f"Warning: {md(iv['warning'])}.")
    if sm.get("note"):
        lines.append(f"Note: {md(sm['note'])}.")
    return "\n".join(lines) + "\n"


def _played(results: dict) -> str:
    """What the scores rest on besides the protocol: the random episodes, the policy's arguments and
    what it says it is, the baselines file."""
    s, policy = results["settings"], results.get("policy") or {}
    said = [f"{counted(s.get('random_episodes', 0), 'random episode')} a game in this run"]
    if s.get("policy_kwargs"):
        said.append(f"policy kwargs {md(json.dumps(s['policy_kwargs'], sort_keys=True))}")
    if policy.get("identity"):
        said.append(f"the policy says it is {md(json.dumps(policy['identity'], sort_keys=True))}")
    if s.get("baselines"):
        said.append(f"baselines from {md(s['baselines'])}")
    return "; ".join(said) + "."


def markdown_all(runs: list[dict]) -> str:
    """Each file's report, and what makes their aggregates not side by side: other games, another protocol."""
    text = "\n".join(markdown(r) for r in runs)
    if len(runs) < 2:
        return text
    names = [md(r.get("_file") or r["settings"]["policy"]) for r in runs]
    notes = []
    games = [{g["game"] for g in scored_sets(r["games"])["all"]} for r in runs]
    if len({frozenset(g) for g in games}) > 1:
        every = set.intersection(*games)
        notes.append(
            "the files cover different games ("
            + "; ".join(
                f"{name} also {', '.join(sorted(g - every))}" for name, g in zip(names, games, strict=True) if g - every
            )
            + "), so their aggregates are over different games; `laya-eval compare` takes the games both hold"
        )
    protocols = [r["protocol"] for r in runs]
    if any(p != protocols[0] for p in protocols):
        keys = sorted({k for p in protocols for k in p if any(q.get(k) != p.get(k) for q in protocols)})
        notes.append(
            "the files were played under different protocols ("
            + "; ".join(f"{k}: " + " against ".join(str(p.get(k)) for p in protocols) for k in keys)
            + "), so their scores are not one experiment"
        )
    return text + "".join(f"\nNote: {n}.\n" for n in notes)


def figure_sets(results: dict) -> list[tuple[str, list[dict]]]:
    """The sets of games a figure draws for one file: all with a normalised score, and the unflagged
    ones where flags leave some out (as the summary's two columns)."""
    sets = scored_sets(results["games"])
    out = [("all", sets["all"])] if sets["all"] else []
    if sets["unflagged"] and len(sets["unflagged"]) < len(sets["all"]):
        out.append(("unflagged", sets["unflagged"]))
    return out


def _figure_rows(runs: list[dict]) -> list[tuple[int, dict, str, list[dict]]]:
    """(file's index, file, set name, its games) for every set of games of every file a figure draws."""
    return [(k, r, name, games) for k, r in enumerate(runs) for name, games in figure_sets(r)]


def _scored(results: dict) -> list[dict]:
    return scored_sets(results["games"])["all"]


def _set_label(results: dict, name: str, games: list[dict]) -> str:
    n = counted(len(games), "game")
    return f"{_label(results)}: " + (f"all {n}" if name == "all" else f"{n.replace(' ', ' unflagged ', 1)}")


def _label(results: dict) -> str:
    """The policy spec, and the results file's name when given (two files of one policy differ)."""
    name = results.get("_file")
    policy = tex(results["settings"]["policy"], 40 if name else 60)
    return f"{policy} ({tex(name, 40, keep_end=True)})" if name else policy


def out_folder(out_dir: str | Path, make: bool = True) -> Path:
    """The ``--out`` folder, made if missing (with ``make``); anything else there is refused on one line."""
    if not str(out_dir):  # Path("") is the current folder: a report would land among the user's files
        raise EvalError("is empty; name the folder to write into", field="--out")
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise EvalError("is not a folder (the report and its figures go in one)", file=str(out), field="--out")
    if not make:
        return out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EvalError(f"cannot be made ({e.strerror or type(e).__name__})", file=str(out), field="--out") from None
    return out


def _png(fig, path: Path) -> None:
    fig.savefig(path, format="png", dpi=120, bbox_inches="tight")


#: Results files drawn on one set of figures at most: a row each, past which a figure is not read
#: (610 took 3.9 GB and 56 s). The markdown alone takes any number.
MAX_DRAWN = 50


def write_report(runs: dict | list[dict], out_dir: str | Path) -> list[Path]:
    """report.md and the figures for one results file or several, in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [runs] if isinstance(runs, dict) else runs
    new_folders = [p for p in (Path(out_dir), *Path(out_dir).parents) if not p.exists()]  # deepest first
    out = out_folder(out_dir)
    text = markdown_all(runs)
    try:
        # one report into a folder at a time: two left one's report.md beside the other's figures
        with FileLock.beside(out, f"a report into {out}", lambda m, f: EvalError(m, file=f, field="--out")):
            # every file written before any is put in place: a full disk at a figure left the new
            # report.md beside an earlier report's figures
            staged: dict[Path, Path] = {}
            try:
                staged[out / "report.md"] = stage_file(out / "report.md", lambda tmp: tmp.write_text(text, "utf-8"))
                runs = [r for r in runs if _scored(r)]
                for name, draw in FIGURES if runs else ():
                    fig = draw(plt, runs)
                    try:
                        staged[out / name] = stage_file(out / name, partial(_png, fig))
                    finally:
                        plt.close(fig)
                written = put_in_place(staged)
            finally:
                for tmp in staged.values():  # what was not put in place (renamed, a name is gone)
                    tmp.unlink(missing_ok=True)
            for name, _ in FIGURES if not runs else ():  # no game scored: an earlier report's would show another run
                if (out / name).is_file() or (out / name).is_symlink():
                    (out / name).unlink()
    except BaseException:
        for folder in new_folders:  # the folders this report made, if still empty (its lock is gone by now)
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    return written


def _per_game(plt, runs: list[dict]):
    from matplotlib.patches import Patch

    games = sorted({g["game"] for r in runs for g in _scored(r)})
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.9 * len(games) * len(runs) + 2), 3.8))
    colours = plt.get_cmap("tab10").colors
    for k, r in enumerate(runs):
        by = {g["game"]: g for g in _scored(r)}
        xs = [i + (k - (len(runs) - 1) / 2) * width for i, game in enumerate(games) if game in by]
        gs = [by[game] for game in games if game in by]
        means = np.array([g["normalised"] for g in gs])
        cis = np.array([bootstrap_ci(mean_of_means, [g["normalised_scores"]]) for g in gs]).reshape(-1, 2)
        err = np.abs(cis.T - means)
        bars = ax.bar(xs, means, width, color=colours[k % 10], edgecolor=colours[k % 10], yerr=err, capsize=3)
        for bar, g in zip(bars, gs, strict=True):
            if g["flags"]:  # the run's colour stays readable; the hatch says "not skill"
                bar.set_facecolor((*colours[k % 10], 0.25))
                bar.set_hatch("//")
    ax.axhline(0, color="k", lw=0.8)
    ax.axhline(1, color="tab:green", lw=0.8, ls="--")
    ax.set_xticks(range(len(games)), games, rotation=30, ha="right")
    ax.set_ylabel("normalised score (0 random, 1 expert)")
    ax.set_title(f"Per-game normalised score, {CONFIDENCE} CI")
    handles = [Patch(facecolor=colours[k % 10], label=_label(r)) for k, r in enumerate(runs)]
    handles += [
        Patch(facecolor="white", edgecolor="grey", hatch="//", label="flagged: not read as skill (see the report)"),
        plt.Line2D([], [], color="tab:green", ls="--", label="expert"),
    ]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


def _aggregates(plt, runs: list[dict]):
    """A row per file and set of games (all, unflagged), each the summary's own figures."""
    rows = _figure_rows(runs)
    fig, axes = plt.subplots(1, len(AGGREGATES), figsize=(3.0 * len(AGGREGATES), 0.6 * len(rows) + 1.6))
    colours = plt.get_cmap("tab10").colors
    for ax, (key, label) in zip(axes, AGGREGATES, strict=True):
        for y, (k, r, name, _) in enumerate(rows):
            v = r["summary"][name]
            lo, hi = v[f"{key}_ci95"]
            ax.barh(y, hi - lo, left=lo, height=0.6, color=colours[k % 10], alpha=0.75 if name == "all" else 0.45)
            ax.plot([v[key], v[key]], [y - 0.3, y + 0.3], color="k", lw=1.5)
        labels = [_set_label(r, name, games) for _, r, name, games in rows]
        ax.set_yticks(range(len(rows)), labels if ax is axes[0] else [""] * len(rows))
        ax.set_title(label)
        ax.grid(axis="x", alpha=0.3)
    kinds = sorted({r["summary"].get("intervals", {}).get("bootstrap", "episode") for r in runs})
    fig.supxlabel(
        f"normalised score; bars: {CONFIDENCE} CI ({' / '.join(kinds)} bootstrap), black line: point estimate"
    )
    fig.tight_layout()
    return fig


def _profile(plt, runs: list[dict]):
    taus = np.linspace(*NORMALISED_RANGE, 201)  # the range outside which a normalised score is flagged
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    colours = plt.get_cmap("tab10").colors
    for k, r, name, games in _figure_rows(runs):
        scores = [np.asarray(g["normalised_scores"], float) for g in games]
        curve = performance_profile(scores, taus)
        kind = r["summary"].get("intervals", {}).get("bootstrap", "episode")
        lo, hi = bootstrap_ci(lambda s: performance_profile(s, taus), scores, kind=kind, curve=True)
        style = "-" if name == "all" else "--"
        ax.step(taus, curve, where="post", color=colours[k % 10], ls=style, label=_set_label(r, name, games))
        ax.fill_between(taus, lo, hi, step="post", color=colours[k % 10], alpha=0.2 if name == "all" else 0.1)
    ax.set_xlabel("normalised score τ")
    ax.set_ylabel("fraction of episodes with score > τ")
    kinds = sorted({r["summary"].get("intervals", {}).get("bootstrap", "episode") for r in runs})
    ax.set_title(f"Performance profile ({CONFIDENCE} band, {' / '.join(kinds)} bootstrap)")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), frameon=False)
    fig.tight_layout()
    return fig


#: A report's figures, each file and what draws it.
FIGURES = (("normalised.png", _per_game), ("aggregates.png", _aggregates), ("profile.png", _profile))


def write_improvement(result: dict, out_dir: str | Path) -> Path:
    """improvement.png: P(B > A) per game and over all games, with the overall interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = out_folder(out_dir)
    rows = [r for r in result["rows"] if not r["failed"] and r["game"] not in result["left_out"]]
    fig, ax = plt.subplots(figsize=(5.5, 0.45 * (len(rows) + 1) + 1.4))
    ys = list(range(len(rows)))
    ax.scatter([r["p"] for r in rows], ys, color="tab:blue", zorder=3, label="per game")
    if result["p"] is not None:
        lo, hi = result["p_ci95"]
        ax.barh(
            len(rows), hi - lo, left=lo, height=0.6, color="tab:orange", alpha=0.75, label=f"all games, {CONFIDENCE} CI"
        )
        ax.plot([result["p"]] * 2, [len(rows) - 0.3, len(rows) + 0.3], color="k", lw=1.5)
    ax.axvline(0.5, color="k", lw=0.8, ls="--")
    ax.set_yticks([*ys, len(rows)], [r["game"] for r in rows] + ["all games"])
    ax.set_xlim(0, 1)
    ax.set_xlabel("P(B > A): chance an episode of B outscores one of A")
    ax.set_title("Probability of improvement", loc="left")
    ax.text(
        0,
        -0.25,
        f"A: {tex(result['a'])}\nB: {tex(result['b'])}",
        transform=ax.transAxes,
        va="top",
        fontsize=7,
        wrap=True,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False, fontsize=8)
    fig.tight_layout()
    path = replace_file(out / "improvement.png", partial(_png, fig))
    plt.close(fig)
    return path
