"""What report and compare print, read as a researcher reads them: which file is A, numbers that
differ shown different, every game left out named, and what a run's figures rest on. Two small
real runs, then copies of their files with scores edited (each game's derived fields recomputed,
so the judge's own checks accept them)."""

import json

import pytest

from laya_eval.baselines import REFERENCE, Baseline
from laya_eval.compare import compare
from laya_eval.compare import markdown as compare_markdown
from laya_eval.evaluate import RunConfig, derived, evaluate, load_results
from laya_eval.report import markdown as report_markdown

CAP = 50


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("said")
    paths = []
    for name, policy in (("a", "random"), ("b", "constant:FIRE")):
        out = root / f"{name}.json"
        cfg = RunConfig(policy=policy, games=["Pong", "Breakout"], out=str(out), episodes=2, random_episodes=1, cap=CAP)
        evaluate(cfg, progress=False)
        paths.append(out)
    return paths


def edited(path, tmp_path, name, scores=None, failed=()):
    """A copy of a results file with some games' scores set (derived fields recomputed) or failed."""
    doc = json.loads(path.read_text())
    for game, g in doc["games"].items():
        if game in failed:
            doc["games"][game] = {"game": game, "error": "the policy stopped answering", "excluded": False}
        elif scores and game in scores:
            g["scores"] = scores[game]
            g.update(derived(game, g["scores"], Baseline(**g["baseline"]), CAP, g["random"]["mean"]))
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return str(out)


def test_compare_says_which_file_and_policy_is_a_and_which_b(runs):
    text = compare_markdown(compare(str(runs[0]), str(runs[1])))
    assert str(runs[0]) in text and str(runs[1]) in text, text
    assert "random" in text.split("\n")[0] and "constant:FIRE" in text.split("\n")[1], text


def test_compare_shows_means_that_differ_as_different(runs, tmp_path):
    a = edited(runs[0], tmp_path, "a.json", {"Pong": [2.0, 2.0], "Breakout": [10.06, 10.06]})
    b = edited(runs[1], tmp_path, "b.json", {"Pong": [2.0, 2.04], "Breakout": [10.04, 10.04]})
    row = next(line for line in compare_markdown(compare(a, b)).splitlines() if line.startswith("| Pong |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[1] != cells[2] and cells[3] not in ("+0.0", "0.0", "-0.0"), row
    assert cells[5] != cells[6], row  # the normalised scores too
    # 10.06 and 10.04 read 10.1, 10.0 and +0.0 at one decimal: the difference decides too
    close = next(line for line in compare_markdown(compare(a, b)).splitlines() if line.startswith("| Breakout |"))
    assert [c.strip() for c in close.split("|")[1:-1]][3] == "-0.02", close
    same = next(line for line in compare_markdown(compare(a, a)).splitlines() if line.startswith("| Pong |"))
    assert [c.strip() for c in same.split("|")[1:-1]][3] in ("+0.0", "0.0"), same  # equal means stay short


def test_a_game_failed_in_both_files_is_said_so_and_named_as_left_out(runs, tmp_path):
    a = edited(runs[0], tmp_path, "a.json", failed=("Breakout",))
    b = edited(runs[1], tmp_path, "b.json", failed=("Breakout",))
    text = compare_markdown(compare(a, b))
    assert "| Breakout | failed in A and B |" in text, text
    left = next(line for line in text.splitlines() if line.startswith("Left out of P(B > A)"))
    assert "Breakout" in left and "failed" in left, left


def test_a_game_failed_in_one_file_is_named_as_left_out(runs, tmp_path):
    b = edited(runs[1], tmp_path, "b.json", failed=("Pong",))
    text = compare_markdown(compare(str(runs[0]), b))
    assert "| Pong | failed in B |" in text
    assert any(line.startswith("Left out of P(B > A)") and "Pong" in line for line in text.splitlines()), text


def test_compare_marks_normalised_scores_from_baselines_at_another_cap(runs):
    text = compare_markdown(compare(str(runs[0]), str(runs[1])))
    row = next(line for line in text.splitlines() if line.startswith("| Pong |"))
    assert "cap" in row.split("|")[-2], row  # the reference table's baselines are at 4,500, the runs at 50


def test_a_random_score_from_another_cap_does_not_decide_beats_random():
    """With no random episodes in the run, the reference table's random (cap 4,500) was compared with a
    score at cap 50: the random policy beat random."""
    g = derived("Pong", [0.0, 0.0], REFERENCE["Pong"], CAP, None)
    assert g["beats_random"] is None, g  # nothing to beat is not a loss either
    assert derived("Pong", [0.0, 0.0], REFERENCE["Pong"], REFERENCE["Pong"].cap, None)["beats_random"] is True


def test_the_report_says_what_its_figures_rest_on(runs):
    results = load_results(runs[0])
    text = report_markdown(results)
    head = text.split("| game |")[0]
    assert "1 random episode a game" in head, head
    assert "kwargs" not in head  # none were given
    row = next(line for line in text.splitlines() if line.startswith("| Pong |"))
    assert "(2 of 2 cut at the cap)" in row, row


def test_the_report_says_what_human_normalised_scores_are_measured_against(runs):
    text = report_markdown(load_results(runs[0]))
    assert "Human-normalised: against the Atari-57" in text and "no sticky actions" in text, text


def test_compare_says_which_settings_of_play_differ_between_the_files(runs, tmp_path):
    """Greedy against sampled play, or other seeds, is a different experiment: compare says so."""
    doc = json.loads(runs[1].read_text())
    doc["settings"]["greedy"], doc["settings"]["seed_base"] = False, 200000
    b = tmp_path / "b.json"
    b.write_text(json.dumps(doc))
    text = compare_markdown(compare(str(runs[0]), str(b)))
    line = next((x for x in text.splitlines() if x.startswith("Settings that differ")), "")
    assert "greedy (A true, B false)" in line and "seed_base (A 100000, B 200000)" in line, text
    assert not any(
        x.startswith("Settings that differ") for x in compare_markdown(compare(*map(str, runs))).splitlines()
    )


def test_compare_takes_a_file_without_later_settings_as_the_run_its_protocol_says(runs, tmp_path):
    """A file an earlier laya-eval wrote has no settings.action_set: compare said "action_set (A null,
    B "minimal")" for two runs of one protocol, whose action_set it had just checked agree."""
    doc = json.loads(runs[1].read_text())
    del doc["settings"]["action_set"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(doc))
    text = compare_markdown(compare(str(runs[0]), str(older)))
    assert not any(x.startswith("Settings that differ") for x in text.splitlines()), text
    del doc["settings"]["random_episodes"]  # what it did not record is said so, not as JSON's null
    older.write_text(json.dumps(doc))
    text = compare_markdown(compare(str(runs[0]), str(older)))
    line = next((x for x in text.splitlines() if x.startswith("Settings that differ")), "")
    assert line == "Settings that differ: random_episodes (A 1, B not recorded).", text


def test_a_run_with_no_random_score_to_beat_does_not_read_as_losing_to_random(tmp_path):
    from laya_eval.evaluate import summarise

    res = evaluate(
        RunConfig(policy="random", games=["Pong"], out=str(tmp_path / "r.json"), episodes=1, random_episodes=0, cap=30),
        progress=False,
    )
    assert res["games"]["Pong"]["beats_random"] is None and res["summary"]["counts"]["random_unmeasured"] == 1
    text = report_markdown(load_results(tmp_path / "r.json"))
    assert "Beats random in 0 of 1 game (1 with no random score at this cap to beat)" in text, text
    assert summarise(res["games"])["counts"]["beats_random"] == 0


def test_a_capped_count_that_is_not_one_is_refused_before_the_report_prints_it(runs, tmp_path):
    from laya_eval.errors import EvalError

    doc = json.loads(runs[0].read_text())
    doc["games"]["Pong"]["capped"] = "<img src=x onerror=alert(1)> | cell"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(EvalError, match="capped"):
        load_results(bad)


def test_a_file_an_earlier_laya_eval_wrote_under_other_rules_is_refused_with_the_way_out(runs, tmp_path):
    doc = json.loads(runs[0].read_text())
    doc["games"]["Pong"]["beats_random"] = not doc["games"]["Pong"]["beats_random"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    from laya_eval.errors import EvalError

    with pytest.raises(EvalError, match="earlier laya-eval .*--restart"):
        load_results(old)
