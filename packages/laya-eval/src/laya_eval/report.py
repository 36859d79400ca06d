"""A results file as a markdown report with plots."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from laya_eval.stats import performance_profile, stratified_bootstrap_ci


def _fmt(x, digits=3) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def markdown(results: dict) -> str:
    s = results["settings"]
    lines = [
        f"# Evaluation of `{s['policy']}`",
        "",
        f"{s['episodes']} episodes per game, seeds from {s['seed_base']}, decision cap {s['cap'] or 'none'}, "
        f"{'greedy' if s['greedy'] else 'sampled'} actions; protocol: "
        + ", ".join(f"{k} {v}" for k, v in results["protocol"].items())
        + ".",
        "",
        "| game | score (mean ± std) | random (this run) | expert / random baseline | normalised | "
        "human-normalised | flags |",
        "| --- | ---: | ---: | --- | ---: | ---: | --- |",
    ]
    for g in results["games"].values():
        if g.get("error"):
            lines.append(f"| {g['game']} | failed: {g['error']} | | | | | |")
            continue
        b = g["baseline"]
        base = f"{b['expert']:g} / {b['random']:g} (cap {b['cap'] or 'none'})" if b else "—"
        rnd = _fmt(g.get("random", {}).get("mean"), 1)
        lines.append(
            f"| {g['game']} | {g['mean']:.1f} ± {g['std']:.1f} | {rnd} | {base} | {_fmt(g['normalised'])} | "
            f"{_fmt(g['human_normalised'])} | {'; '.join(g['flags'])} |"
        )
    sm = results["summary"]
    lines += ["", "| summary | all games with a baseline | unflagged games |", "| --- | ---: | ---: |"]
    for key, label in (
        ("median", "median normalised"),
        ("mean", "mean normalised"),
        ("iqm", "IQM"),
        ("optimality_gap", "optimality gap"),
    ):
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
    lines += [
        "",
        f"Beats random in {n['beats_random']} of {n['scored']} games. Games: {n['games']}, "
        f"with a normalised score: {n['with_normalised']}, unflagged: {n['unflagged']}"
        + (f", failed: {', '.join(sm['failed'])}" if sm["failed"] else "")
        + (f", excluded: {', '.join(sm['excluded'])}" if sm["excluded"] else "")
        + ".",
        "Confidence intervals: 95%, stratified bootstrap over episodes within each game.",
    ]
    return "\n".join(lines) + "\n"


def write_report(results: dict, out_dir: str | Path) -> list[Path]:
    """report.md, normalised.png and profile.png in ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "report.md"]
    written[0].write_text(markdown(results))
    games = [g for g in results["games"].values() if g.get("normalised") is not None and not g.get("error")]
    if not games:
        return written
    names = [g["game"] for g in games]
    means = [g["normalised"] for g in games]
    cis = [stratified_bootstrap_ci(lambda s: float(np.mean(s[0])), [g["normalised_scores"]]) for g in games]
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(names) + 2), 3.5))
    colors = ["tab:gray" if g["flags"] else "tab:blue" for g in games]
    ax.bar(names, means, color=colors, yerr=np.abs(np.array(cis).T - np.array(means)), capsize=3)
    ax.axhline(0, color="k", lw=0.8)
    ax.axhline(1, color="tab:green", lw=0.8, ls="--", label="expert")
    ax.set_ylabel("normalised score")
    ax.set_title(f"{results['settings']['policy']} (grey: flagged; 95% CI)")
    ax.legend(loc="best")
    plt.xticks(rotation=30, ha="right")
    fig.tight_layout()
    fig.savefig(out / "normalised.png", dpi=120)
    plt.close(fig)
    taus = np.linspace(-0.5, 1.5, 81)
    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    ax.plot(taus, performance_profile([np.asarray(g["normalised_scores"]) for g in games], taus))
    ax.set_xlabel("normalised score τ")
    ax.set_ylabel("fraction of episodes > τ")
    ax.set_title("performance profile")
    fig.tight_layout()
    fig.savefig(out / "profile.png", dpi=120)
    plt.close(fig)
    return written + [out / "normalised.png", out / "profile.png"]
