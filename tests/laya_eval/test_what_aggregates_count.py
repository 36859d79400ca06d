"""What each aggregate counts, in every place the judge prints one: a report's tables and figures and
compare's P(B > A) leave out the games the summary leaves out (failed, excluded), keep flagged games
apart, and say what they left out. Two real runs, scored against baselines measured at their own
cap, so some games are unflagged: Pong and Breakout; Tennis is flagged (stalling scores), Solaris
excluded (its expert scores below random)."""

import json

import pytest

from laya_eval.cli import main
from laya_eval.compare import compare
from laya_eval.compare import markdown as compare_markdown
from laya_eval.evaluate import RunConfig, evaluate, load_results

from ..promises import check_promises

CAP = 80
GAMES = ("Pong", "Breakout", "Tennis", "Solaris")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(A, B, the --baselines folder): A plays random on all four games, B FIRE on all but Breakout."""
    root = tmp_path_factory.mktemp("runs")
    metas = root / "metas"
    for game, expert, rnd in (
        ("Pong", 1.0, -2.0),
        ("Breakout", 5.0, 0.0),
        ("Tennis", 1.0, -1.0),
        ("Solaris", 50.0, 150.0),
    ):
        (metas / "expert" / game).mkdir(parents=True)
        meta = {
            "game": game,
            "baselines": {
                "expert": "by hand",
                "expert_score": expert,
                "random_score": rnd,
                "protocol": {"decision_cap": CAP},
            },
        }
        (metas / "expert" / game / "meta.json").write_text(json.dumps(meta))
    paths = []
    for name, policy, games in (("a", "random", GAMES), ("b", "constant:FIRE", ("Pong", "Tennis", "Solaris"))):
        out = root / f"{name}.json"
        cfg = RunConfig(
            policy=policy, games=list(games), out=str(out), episodes=2, random_episodes=1, cap=CAP, baselines=str(metas)
        )
        evaluate(cfg, progress=False)
        paths.append(out)
    return paths[0], paths[1], metas


def test_the_runs_hold_unflagged_flagged_and_excluded_games(runs):
    sm = load_results(runs[0])["summary"]
    assert sm["excluded"] == ["Solaris"] and sm["flagged"] == ["Tennis"], sm
    assert sm["counts"]["unflagged"] == 2, sm["counts"]


def _rescored(path, into, moved: dict) -> str:
    """A copy of a results file in which each game named in ``moved`` scored that value in every
    episode: above or below all of A's, each P(B > A) is 1 or 0, so a game pooled where it should not
    be moves the pooled P."""
    from laya_eval.baselines import Baseline
    from laya_eval.evaluate import derived

    doc = json.loads(path.read_text())
    for name, target in moved.items():
        g = doc["games"][name]
        g["scores"] = [target] * len(g["scores"])
        g.update(derived(name, g["scores"], Baseline(**g["baseline"]), CAP, g.get("random", {}).get("mean")))
    into.write_text(json.dumps(doc))
    return str(into)


def test_compare_says_which_games_it_left_out_and_keeps_excluded_and_flagged_games_apart(runs, tmp_path):
    a, b, _ = runs
    held = load_results(a)["games"]
    up = {g: max(held[g]["scores"]) + 1 for g in ("Pong", "Solaris")}  # B above A: P 1
    b = _rescored(b, tmp_path / "b.json", {**up, "Tennis": min(held["Tennis"]["scores"]) - 1})  # below: P 0
    res = compare(str(a), b)
    assert res["only_in"] == {"A": ["Breakout"], "B": []}, res["only_in"]
    assert res["left_out"] == {"Solaris": "excluded: the expert scores below random"}, res["left_out"]
    rows = {r["game"]: r for r in res["rows"]}
    assert [rows[g]["p"] for g in ("Pong", "Tennis", "Solaris")] == [1.0, 0.0, 1.0], rows
    assert res["games"] == 2 and res["p"] == pytest.approx(0.5), "Pong and Tennis: not the excluded Solaris"
    assert res["unflagged"]["games"] == 1 and res["unflagged"]["p"] == pytest.approx(1.0), "Pong: not flagged Tennis"
    text = compare_markdown(res)
    assert "Breakout (only in A)" in text and "Solaris (excluded" in text, text
    assert "Unflagged games: P(B > A) =" in text and "over 1 game " in text, text
    assert "too few" not in text, "the episode bootstrap needs no more games"
    task = compare_markdown(compare(str(a), b, bootstrap="task"))
    assert "Warning: 2 games: too few to resample games meaningfully" in task, task


def test_compare_warns_when_its_interval_is_a_point(runs, tmp_path):
    a, b, metas = runs
    one = tmp_path / "one.json"
    evaluate(
        RunConfig(policy="constant:FIRE", games=["Pong"], out=str(one), episodes=1, random_episodes=0, cap=CAP),
        progress=False,
    )
    text = compare_markdown(compare(str(one), str(one)))
    assert "Warning: every game has one episode" in text, text


def test_report_figures_draw_the_summarys_games_and_say_which(runs):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from laya_eval.report import _aggregates, _profile, figure_sets

    a = load_results(runs[0])
    sets = {name: sorted(g["game"] for g in games) for name, games in figure_sets(a)}
    assert sets == {"all": ["Breakout", "Pong", "Tennis"], "unflagged": ["Breakout", "Pong"]}, sets
    fig = _aggregates(plt, [a])
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == ["random: all 3 games", "random: 2 unflagged games"], labels
    from laya_eval.report import AGGREGATES

    sm = a["summary"]
    for ax, (key, _) in zip(fig.axes, AGGREGATES, strict=True):  # the bars are the summary's, set by set
        drawn = [(round(p.get_x(), 9), round(p.get_x() + p.get_width(), 9)) for p in ax.patches]
        want = [tuple(round(v, 9) for v in sm[name][f"{key}_ci95"]) for name in ("all", "unflagged")]
        assert drawn == want, (key, drawn, want)
    fig = _profile(plt, [a])
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == ["random: all 3 games", "random: 2 unflagged games"], legend
    plt.close("all")


def test_a_report_of_files_over_other_games_says_so(runs, tmp_path, capsys):
    a, b, _ = runs
    code, _ = check_promises(
        main, ["report", a, b, "--out", tmp_path / "rep"], sandbox=tmp_path, target=tmp_path / "rep"
    )
    assert code == 0
    text = (tmp_path / "rep" / "report.md").read_text()
    assert "| summary | all games with a normalised score | unflagged games |" in text, text
    assert "Note: the files cover different games" in text and "Breakout" in text.split("Note: the files")[1], text
    capsys.readouterr()
    assert main(["report", str(a), str(b)]) == 0
    assert "Note: the files cover different games" in capsys.readouterr().out


def test_a_report_names_where_each_baseline_came_from(runs):
    from laya_eval.report import markdown

    text = markdown(load_results(runs[0]))
    assert "Baselines: " in text and "expert/Pong/meta.json (by hand)" in text, text


def test_a_second_baseline_for_a_game_that_disagrees_is_said(runs, tmp_path, capsys):
    _, _, metas = runs
    import shutil

    both = tmp_path / "metas"
    shutil.copytree(metas, both)
    (both / "strong" / "Pong").mkdir(parents=True)
    meta = json.loads((both / "expert" / "Pong" / "meta.json").read_text())
    meta["baselines"].update(expert="stronger", expert_score=20.0)
    (both / "strong" / "Pong" / "meta.json").write_text(json.dumps(meta))
    argv = ["run", "--policy", "constant:FIRE", "--games", "Pong", "--episodes", "1", "--random-episodes", "0"]
    argv += ["--cap", str(CAP), "--baselines", str(both), "--out", str(tmp_path / "r.json")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "Pong" in err and "2 different baselines" in err and "strong/Pong/meta.json" in err, err


def _edited(doc: dict, game: str, field: str, value):
    doc = json.loads(json.dumps(doc))
    g = doc["games"][game]
    if callable(value):
        value(g)
    else:
        g[field] = value
    return doc


def _bump_first(key):
    def edit(g):
        g[key][0] += 1.0

    return edit


EDITS = [
    ("Pong", "normalised", 0.9),
    ("Pong", "normalised_scores", _bump_first("normalised_scores")),
    ("Pong", "mean", _bump_first("scores")),  # the table's mean no longer that of the scores
    ("Pong", "scores", lambda g: [g[k].append(g[k][0]) for k in ("scores", "normalised_scores")]),  # 3 of 2
    ("Pong", "flags", ["stalling until the cap scores well"]),  # flagged by hand: out of the unflagged column
    ("Tennis", "flags", []),  # a flagged game passed off as skill
    ("Solaris", "excluded", False),
    ("Pong", "excluded", True),
    ("Pong", "beats_random", lambda g: g.update(beats_random=not g["beats_random"])),
    ("Pong", "normalised", lambda g: g["baseline"].update(expert=g["baseline"]["random"])),  # no scale at all
    ("Pong", "baseline", lambda g: g["baseline"].update(expert=g["baseline"]["random"] + 1e-9)),
    ("Pong", "human_normalised", 0.5),
    ("Pong", "human_normalised", lambda g: g.pop("human_normalised")),  # a key left out: one line, not a KeyError
    ("Pong", "normalised", lambda g: [g.pop("normalised"), g.pop("normalised_scores")]),
    ("Pong", "random", lambda g: g["random"].update(mean=g["random"]["mean"] + 1.0)),
]


@pytest.mark.parametrize("game,field,value", EDITS, ids=[f"{g}.{f}" for g, f, _ in EDITS])
def test_what_a_results_file_derives_must_follow_from_its_scores(runs, tmp_path, game, field, value):
    """A report recomputes the summary from the games; a game's own derived fields (its mean, its
    normalised scores, its flags) are checked against its scores and baseline, so an edited table
    cannot disagree with the summary, nor a flag move a game in or out of the unflagged column."""
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(_edited(json.loads(runs[0].read_text()), game, field, value)))
    code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
    assert code == 2 and f"games.{game}.{field}" in err, err


def test_compares_unflagged_games_are_not_chosen_by_how_they_were_played(runs, tmp_path):
    """A game whose normalised score fell outside [-0.5, 1.5] was dropped from the unflagged P(B > A):
    a flag of the play and of each file's baseline, where P(B > A) reads raw scores only."""
    _, _, metas = runs
    import shutil

    tight = tmp_path / "metas"
    shutil.copytree(metas, tight)
    meta = json.loads((tight / "expert" / "Pong" / "meta.json").read_text())
    meta["baselines"].update(expert_score=-1.5, random_score=-2.0)  # random play at cap 80 scores about -1: 2.0
    (tight / "expert" / "Pong" / "meta.json").write_text(json.dumps(meta))
    paths = []
    for name, policy in (("a", "random"), ("b", "constant:FIRE")):
        out = tmp_path / f"{name}.json"
        cfg = RunConfig(
            policy=policy,
            games=["Pong", "Tennis"],
            out=str(out),
            episodes=2,
            random_episodes=0,
            cap=CAP,
            baselines=str(tight),
        )
        evaluate(cfg, progress=False)
        paths.append(out)
    pong = load_results(paths[0])["games"]["Pong"]
    assert any(f.startswith("normalised score") for f in pong["flags"]), pong["flags"]
    held = load_results(paths[0])["games"]
    moved = {"Pong": max(held["Pong"]["scores"]) + 1, "Tennis": min(held["Tennis"]["scores"]) - 1}
    res = compare(str(paths[0]), _rescored(paths[1], tmp_path / "b-moved.json", moved))  # P 1 and 0
    assert res["unflagged"]["games"] == 1, "Pong: flagged for its normalised score, not for what it is"
    assert res["unflagged"]["p"] == pytest.approx(1.0), res["unflagged"]


def _entry(game, scores, expert, rnd, cap=CAP):
    from laya_eval.baselines import Baseline
    from laya_eval.evaluate import derived

    b = Baseline(expert, rnd, "by hand", cap)
    return {"game": game, "scores": scores, "baseline": b.to_dict(), **derived(game, scores, b, cap, rnd)}


def test_a_game_whose_expert_scores_below_random_has_no_normalised_score():
    """(expert - random) < 0 flips the sign: a policy 10 points above random scored -1 and halved the
    "all" mean. Only Solaris was kept out, by name; the rule is the game's, whatever it is called."""
    from laya_eval.evaluate import summarise

    below = _entry("Qbert", [20.0] * 5, expert=0.0, rnd=10.0)
    assert below["normalised"] is None and below["normalised_scores"] is None, below
    assert below["beats_random"] and any("not above random" in f for f in below["flags"]), below
    fine = _entry("Pong", [0.5, 1.0, 1.5], expert=2.0, rnd=0.0)
    alone = summarise({"Pong": fine})
    both = summarise({"Pong": fine, "Qbert": below})
    assert both["all"] == alone["all"] and both["counts"]["with_normalised"] == 1, both


def test_the_intervals_do_not_depend_on_the_order_games_finished_in():
    """A Ray run records games in the order they finish: the same scores must give the same intervals."""
    from laya_eval.evaluate import summarise

    games = {
        g: _entry(g, [float(i * k % 7) for i in range(6)], expert=6.0, rnd=0.0)
        for k, g in enumerate(("Pong", "Breakout", "Boxing", "Freeway"), start=1)
    }
    backwards = dict(reversed(list(games.items())))
    for kind in ("episode", "task"):
        assert summarise(games, bootstrap=kind) == summarise(backwards, bootstrap=kind), kind


def test_compare_gives_the_same_interval_whatever_order_the_files_hold_their_games_in(runs, tmp_path):
    """Scores that vary within each game (the runs' own are near constant at this cap), so the draws'
    order would show; A's file then holds the same games backwards."""
    from laya_eval.baselines import Baseline
    from laya_eval.evaluate import derived

    paths = {}
    for side, path, shift in (("a", runs[0], 0.0), ("b", runs[1], 1.0)):
        doc = json.loads(path.read_text())
        doc["settings"]["episodes"] = 9
        for k, (name, g) in enumerate(doc["games"].items()):
            g["scores"], g["steps"] = [shift + (k * i) % 5 + 0.5 * i for i in range(9)], []
            b = Baseline(**g["baseline"])
            g.update(derived(name, g["scores"], b, CAP, g["random"]["mean"]))
        paths[side] = tmp_path / f"{side}.json"
        paths[side].write_text(json.dumps(doc))
        if side == "a":
            doc["games"] = dict(reversed(list(doc["games"].items())))
            paths["back"] = tmp_path / "back.json"
            paths["back"].write_text(json.dumps(doc))
    forth, back = compare(str(paths["a"]), str(paths["b"])), compare(str(paths["back"]), str(paths["b"]))
    assert forth["p_ci95"][0] < forth["p_ci95"][1], forth  # the draws matter
    assert [forth[k] for k in ("p", "p_ci95", "unflagged")] == [back[k] for k in ("p", "p_ci95", "unflagged")]
