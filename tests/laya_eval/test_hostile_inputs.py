"""The standing test for the judge's file inputs: results files and dataset meta.json handed to
`report`, `compare` and `run --baselines`, damaged or hostile, keep the promises of
``tests/promises.py`` (hostile policies are the judge's own tests)."""

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings

from laya_eval.cli import main

from ..atari_data.test_hostile_inputs import apply, edits
from ..promises import check_promises, lock_held_elsewhere, returns_within

SETTINGS = settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("results") / "r.json"
    assert (
        main(
            [
                "run",
                "--policy",
                "random",
                "--games",
                "Pong",
                "--episodes",
                "2",
                "--cap",
                "30",
                "--random-episodes",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


@SETTINGS
@given(edit=edits)
def test_report_and_compare_keep_the_promises(results, tmp_path_factory, edit):
    box = tmp_path_factory.mktemp("box")
    bad = box / "r.json"
    shutil.copy(results, bad)
    bad.write_bytes(apply(bad.read_bytes(), edit))
    check_promises(main, ["report", bad], sandbox=box, target=None)
    check_promises(main, ["report", bad, "--out", box / "report"], sandbox=box, target=box / "report")
    check_promises(main, ["compare", results, bad], sandbox=box, target=None)


@pytest.mark.parametrize(
    "edit",
    [
        lambda r: r.update(games=[1, 2]),
        lambda r: r["games"]["Pong"].update(scores="many"),
        lambda r: r["games"]["Pong"].update(mean=None),
        lambda r: r["games"]["Pong"].update(normalised_scores=[{"x": 1}], normalised=0.5),
        lambda r: r["games"].update(Pong=7),
        lambda r: r["games"]["Pong"].pop("std"),
        lambda r: r["games"]["Pong"].update(baseline="x"),
        lambda r: r["games"]["Pong"].update(baseline={"expert": "x", "random": 0}),
        lambda r: r["games"]["Pong"].update(flags=[1]),
        lambda r: r["games"]["Pong"].update(random=[]),
        lambda r: r["games"]["Pong"].update(human_normalised="x"),
        # each of these was a traceback (an outside hostile review): OverflowError, KeyError, UnicodeEncodeError
        lambda r: r["games"]["Pong"].update(mean=10**400),
        lambda r: r["games"].update(Pong={"game": "Pong", "error": "boom"}),
        lambda r: r["games"].update(Pong={**r["games"]["Pong"], "error": ""}),
        lambda r: r["games"].update({"\ud800": {**r["games"]["Pong"], "game": "\ud800"}}),
        lambda r: r["games"]["Pong"].update(normalised_scores=r["games"]["Pong"]["normalised_scores"][:1]),
        # finite, but past what sums and squares hold: report drew inf [nan, nan] with RuntimeWarnings
        lambda r: r["games"]["Pong"].update(scores=[1e308, 1e308], mean=1e308),
        lambda r: r["games"]["Pong"].update(normalised_scores=[1e308, 1e308], normalised=1e308),
        lambda r: r["games"]["Pong"].update(baseline={"expert": 1e308, "random": -1e308, "cap": None}),
    ],
)
def test_a_results_file_with_wrong_types_is_one_line(results, tmp_path, edit):
    data = json.loads(results.read_text())
    edit(data)
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(data))
    code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
    assert code == 2 and "r.json: games" in err, err


@pytest.mark.parametrize(
    "meta",
    [
        '{"game": "Pong", "baselines": {"expert_score": "high", "random_score": 0}}',
        '{"game": "Pong", "baselines": [1]}',
        "[" * 50_000 + "]" * 50_000,
        '{"game": "Pong", "baselines": {"expert_score": ' + "9" * 5000 + "}}",
        # written into the results, which report then refused
        '{"game": "Pong", "baselines": {"expert_score": 5, "random_score": -20, "protocol": {"decision_cap": [1, 2]}}}',
        '{"game": "Pong", "protocol": {"decision_cap": -3}, "baselines": {"expert_score": 5, "random_score": -20}}',
        '{"game": ["Pong"], "baselines": {"expert_score": 5, "random_score": -20}}',
        # accepted, then the run failed after playing (-inf), reported 0.000 (overflow), or used another table
        '{"game": "Pong", "baselines": {"expert_score": 5e-324, "random_score": 0}}',
        '{"game": "Pong", "baselines": {"expert_score": 1e308, "random_score": -1e308}}',
        '{"game": "pong", "baselines": {"expert_score": 5, "random_score": -20}}',
    ],
)
def test_run_with_hostile_baselines_is_one_line(tmp_path, meta):
    path = tmp_path / "meta.json"
    path.write_text(meta)
    out = tmp_path / "r.json"
    code, err = check_promises(
        main,
        [
            "run",
            "--policy",
            "random",
            "--games",
            "Pong",
            "--episodes",
            "1",
            "--cap",
            "10",
            "--baselines",
            path,
            "--out",
            out,
        ],
        sandbox=tmp_path,
        target=out,
    )
    assert code == 2 and "meta.json" in err and not out.exists(), err


@pytest.mark.parametrize(
    "edit,field",
    [
        (lambda r: r.update(settings=[]), "settings"),
        (lambda r: r["settings"].pop("policy"), "settings"),
        (lambda r: r.update(protocol=[1]), "protocol"),
        # each setting of the type laya-eval writes (these were rendered into reports as they came)
        (lambda r: r["settings"].update(episodes="abc"), "settings.episodes"),
        (lambda r: r["settings"].update(episodes=0), "settings.episodes"),
        (lambda r: r["settings"].update(cap="x"), "settings.cap"),
        (lambda r: r["settings"].update(greedy="yes"), "settings.greedy"),
        (lambda r: r["settings"].update(seed_base=[1]), "settings.seed_base"),
        (lambda r: r["settings"].update(policy={"a": 1}), "settings.policy"),
        # the played policy's record (run resumes into it; laya-policy push reads its spec)
        (lambda r: r.update(policy=[]), "policy"),
        (lambda r: r["policy"].update(spec=7), "policy"),
        (lambda r: r["policy"].update(kwargs=[1]), "policy"),
        (lambda r: r["policy"].update(identity="me"), "policy"),
        # from an outside review: each was accepted and printed, or taken as it came
        (lambda r: r["settings"].update(episodes=10**6), "settings.episodes"),  # past run's 10,000 a game
        (lambda r: r["settings"].update(seed_base=10**4000), "settings.seed_base"),  # 4,001 digits printed
        (lambda r: r["settings"].update(random_episodes=float("nan")), "settings.random_episodes"),
        (lambda r: r["settings"].update(action_set="<b>full</b>"), "settings.action_set"),
        (lambda r: r["protocol"].update(frameskip=float("nan")), "protocol.frameskip"),
        (lambda r: r["protocol"].update(frameskip=float("inf")), "protocol.frameskip"),
        (lambda r: r["protocol"].update(**{"x<script> inf": 1}), "protocol"),
        (lambda r: r.update(date={"x": [1, 2, 3]}), "date"),
        (lambda r: r.update(laya_eval=["a"]), "laya_eval"),
        # the games a run had not yet scored, which report names
        (lambda r: r.update(pending="Breakout"), "pending"),
        (lambda r: r.update(pending=["Breakout<script>"]), "pending"),
        (lambda r: r.update(pending=["Breakout", "Breakout"]), "pending"),
        (lambda r: r.update(pending=["Pong"]), "pending"),  # scored, and not a failed game being retried
        # a file at odds with itself: cap-30 scores under a top-level cap of 4500 passed compare's check
        (lambda r: r["protocol"].update(decision_cap=4500), "protocol.decision_cap"),
        (lambda r: r["settings"].update(action_set="full"), "protocol.action_set"),  # compare reads the protocol's
        (lambda r: r["games"]["Pong"]["protocol"].update(frameskip=5), "games.Pong.protocol"),
        (lambda r: r["games"]["Pong"].update(steps="lots"), "games.Pong.steps"),
        (lambda r: r["games"]["Pong"].update(actions=None), "games.Pong.actions"),
        (lambda r: r["games"]["Pong"].update(actions={"NOOP": -1}), "games.Pong.actions"),
        (lambda r: r["games"]["Pong"].update(seconds=float("nan")), "games.Pong.seconds"),
        (
            lambda r: r["games"]["Pong"].update(random={**r["games"]["Pong"]["random"], "scores": [0.0] * 10_001}),
            "games.Pong.random",
        ),
    ],
)
def test_a_results_file_with_wrong_settings_is_one_line(results, tmp_path, edit, field):
    data = json.loads(results.read_text())
    edit(data)
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(data))
    code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
    assert code == 2 and f"r.json: {field}:" in err, err


def test_a_results_file_with_a_key_given_twice_is_one_line(results, tmp_path):
    """JSON readers disagree on which of two values counts: the file is refused, not read one way."""
    bad = tmp_path / "r.json"
    bad.write_text('{"summary": {}, ' + results.read_text().lstrip()[1:])
    code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
    assert code == 2 and "'summary' given twice" in err, err


def test_a_file_name_with_a_newline_is_said_on_one_line(results, tmp_path):
    """The name is the user's, and may hold a newline or bytes that are not UTF-8: the error escapes
    them, as atari-data's and laya-policy's do."""
    import os

    for name in ("a\nb.json", os.fsdecode(b"r\xff.json")):
        bad = tmp_path / name
        bad.write_text('{"x": 1}')
        code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
        assert code == 2 and "not a laya-eval results file" in err, err
        assert ("a\\nb.json" in err) if "\n" in name else ("r\\udcff.json" in err), err
        code, err = check_promises(main, ["compare", results, bad], sandbox=tmp_path, target=None)
        assert code == 2, err


def test_a_fifo_as_results_file_is_one_line_not_a_wait(results, tmp_path):
    import os

    fifo = tmp_path / "r.json"
    os.mkfifo(fifo)
    for argv in (
        ["report", fifo],
        ["compare", results, fifo],
        ["run", "--policy", "random", "--games", "Pong", "--episodes", "1", "--cap", "10", "--out", fifo],
    ):
        done, got = returns_within(
            60, lambda argv=argv: check_promises(main, argv, sandbox=tmp_path, target=fifo), [fifo]
        )
        assert done, f"{argv[0]} waited on the FIFO for a writer"
        code, err = got
        assert code == 2 and "not a regular file" in err, err


@pytest.mark.parametrize("command", ["report", "compare"])
def test_report_and_compare_out_that_is_not_a_folder_is_one_line(results, tmp_path, command):
    import os

    inputs = [results] if command == "report" else [results, results]
    taken = tmp_path / "taken"
    taken.write_text("someone's file\n")
    code, err = check_promises(main, [command, *inputs, "--out", taken], sandbox=tmp_path, target=None)
    assert code == 2 and "--out" in err and taken.read_text() == "someone's file\n", err
    # a FIFO planted where a figure or the report goes is replaced, not written into (which waits for a reader)
    folder = tmp_path / "rep"
    folder.mkdir()
    for name in ("report.md", "normalised.png", "improvement.png"):
        os.mkfifo(folder / name)
    done, got = returns_within(
        120,
        lambda: check_promises(main, [command, *inputs, "--out", folder], sandbox=tmp_path, target=folder),
        list(folder.iterdir()),
    )
    assert done and got[0] == 0, f"{command} waited on a FIFO in --out"
    written = "report.md" if command == "report" else "improvement.png"
    assert (folder / written).is_file()


@pytest.mark.parametrize("command", ["report", "compare"])
def test_an_out_that_cannot_be_one_is_refused_before_anything_is_printed(results, tmp_path, capsys, command):
    """compare printed its whole table, then refused its --out; report --out '' printed the markdown
    as if no --out were given (from an outside review)."""
    inputs = [str(results)] * (1 if command == "report" else 2)
    taken = tmp_path / "taken"
    taken.write_text("someone's file\n")
    for out in ("", str(taken)):
        assert main([command, *inputs, "--out", out]) == 2, out
        printed = capsys.readouterr()
        assert printed.out == "" and "--out" in printed.err, (out, printed)


def test_a_report_draws_at_most_fifty_files(results, tmp_path, capsys):
    """610 files drawn on one set of figures took 3.9 GB and 56 s (an outside review); past 50 rows a
    figure is not read anyway. The markdown alone takes any number."""
    many = [str(results)] * 51
    assert main(["report", *many, "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and "50" in err and not (tmp_path / "rep").exists(), err
    assert main(["report", *many]) == 0


def test_a_device_as_results_file_is_one_line(tmp_path):
    (tmp_path / "r.json").symlink_to("/dev/zero")
    code, err = check_promises(main, ["report", tmp_path / "r.json"], sandbox=tmp_path, target=None)
    assert code == 2 and "not a regular file" in err, err


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--policy-kwargs", "[1]"], "--policy-kwargs"),
        (["--games", ""], "--games"),
        (["--games", " , "], "--games"),
        (["--timeout", "-1"], "--timeout"),
        (["--timeout", "nan"], "--timeout"),
        (["--cap", "0"], "--cap"),
        (["--cap", "-5"], "--cap"),
        (["--random-episodes", "-2"], "--random-episodes"),
        (["--threads", "-1"], "--threads"),
        (["--policy", "constant:JUMP"], "--policy"),
        (["--policy", "constant:UPFIRE"], "--policy"),  # an ALE button, but not one of Pong's
        # ALE takes a seed as a signed 32-bit integer: these were tracebacks out of ale-py
        (["--seed-base", "-1"], "--seed-base"),
        (["--seed-base", "100000000000000000000"], "--seed-base"),
        (["--episodes", "100000000000"], "--episodes"),  # every episode runs side by side
        (["--timeout", "1e10"], "--timeout"),  # accepted, then every game failed on an OverflowError
        (["--out", "newdir/"], "--out"),  # wrote a file named newdir
    ],
)
def test_run_flags_are_checked_before_anything_is_played(tmp_path, flags, field):
    out = tmp_path / "r.json"
    argv = ["run", "--policy", "random", "--games", "Pong", "--episodes", "1", "--cap", "10", "--out", out]
    for i in range(0, len(flags), 2):  # the flag under test replaces the default one
        if flags[i] in argv:
            j = argv.index(flags[i])
            argv[j : j + 2] = []
    code, err = check_promises(main, [*argv, *flags], sandbox=tmp_path, target=out)
    assert code == 2 and field in err and not out.exists(), err


@pytest.mark.parametrize("command", [["run", "--policy", "random", "--games", "Pong"], ["doom", "--policy", "random"]])
def test_policy_kwargs_nested_past_the_parser_is_a_usage_error_not_a_traceback(tmp_path, capsys, command):
    with pytest.raises(SystemExit) as stop:
        main([*command, "--policy-kwargs", "[" * 30_000 + "]" * 30_000, "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --policy-kwargs: not JSON" in err and "Traceback" not in err, err


@pytest.mark.parametrize("command", [["run", "--policy", "random", "--games", "Pong"], ["doom", "--policy", "random"]])
def test_policy_kwargs_of_nan_is_a_usage_error_before_any_play(tmp_path, capsys, command):
    """doom played every episode of all four, then failed to write the NaN (an outside review)."""
    with pytest.raises(SystemExit) as stop:
        main([*command, "--policy-kwargs", '{"x": NaN}', "--out", str(tmp_path / "r.json")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --policy-kwargs: NaN is not standard JSON" in err, err
    assert not (tmp_path / "r.json").exists()


def test_report_help_shows_percent_signs_once(capsys):
    with pytest.raises(SystemExit):
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert "95% intervals" in out and "%%" not in out


def test_baselines_that_are_a_device_are_named_as_such(tmp_path):
    (tmp_path / "meta.json").symlink_to("/dev/zero")
    argv = ["run", "--policy", "random", "--games", "Pong", "--episodes", "1", "--cap", "10"]
    argv += ["--baselines", tmp_path / "meta.json", "--out", tmp_path / "r.json"]
    code, err = check_promises(main, argv, sandbox=tmp_path, target=tmp_path / "r.json")
    assert code == 2 and "is not a file or a folder" in err, err


def test_an_unwritable_out_is_refused_before_the_first_game(tmp_path):
    import os

    if os.geteuid() == 0:
        blocked = tmp_path / "a-file" / "r.json"  # root writes anywhere: a file where a folder must be
        (tmp_path / "a-file").write_text("")
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        blocked = tmp_path / "ro" / "r.json"
    for out in (blocked, tmp_path):  # and a folder given as the file
        argv = ["run", "--policy", "random", "--games", "Pong", "--episodes", "1", "--cap", "10", "--out", out]
        code, err = check_promises(main, argv, sandbox=tmp_path, target=None)
        assert code == 2 and "--out" in err, err
        if out == blocked and os.geteuid() == 0:  # it said 'cannot be written (File exists)'
            assert "a-file is a file, not a folder" in err, err


def test_a_second_run_on_the_same_results_file_is_refused_while_the_first_writes(tmp_path):

    out = tmp_path / "r.json"
    lock = tmp_path / ".r.json.lock"
    argv = ["run", "--policy", "random", "--games", "Pong", "--episodes", "1", "--cap", "10", "--out", out]
    with lock_held_elsewhere(lock) as pid:  # another laya-eval run holds the results file, as evaluate() takes it
        code, err = check_promises(main, argv, sandbox=tmp_path, target=out)
        assert code == 2 and f"pid {pid}" in err and "--out" in err and not out.exists(), err
    code, err = check_promises(main, [*argv, "--random-episodes", "0"], sandbox=tmp_path, target=out)
    assert code == 0 and out.exists() and not lock.exists(), "once the first is done the file is free, no trace left"


@pytest.mark.parametrize(
    "text",
    [
        "evil\n\n<script>alert(1)</script>\n# Injected heading",
        "a | b | c",
        "code`span` breaks",
        "[a link](https://example.invalid) *loud* __louder__ ~~gone~~",  # rendered as a link and emphasis
        "x$\\frac{1}$y",  # matplotlib's mathtext: a ParseSyntaxException traceback, exit 1
        "$" + "{" * 3000,  # a RecursionError
    ],
)
def test_text_from_a_results_file_is_shown_as_text(results, tmp_path, text):
    """A policy name, an error or a baseline's source went into report.md as Markdown and HTML (a
    heading, a script, a broken table) and into the figures as mathtext (from an outside review)."""
    data = json.loads(results.read_text())
    data["settings"]["policy"] = text
    data["games"]["Pong"]["baseline"]["source"] = text
    failed = {"game": "Breakout", "error": text, "excluded": False}
    data["games"]["Breakout"] = failed
    hostile = tmp_path / "h.json"
    hostile.write_text(json.dumps(data))
    code, err = check_promises(
        main, ["report", hostile, "--out", tmp_path / "rep"], sandbox=tmp_path, target=tmp_path / "rep"
    )
    assert code == 0, err
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "<script>" not in report and "\n# Injected" not in report and "`span`" not in report, report
    assert "[a link](" not in report and "*loud*" not in report and "~~gone" not in report, report
    rows = [line for line in report.splitlines() if line.startswith("| Breakout |")]
    assert len(rows) == 1 and rows[0].replace("\\|", "").count("|") == 8, rows
    assert {p.name for p in (tmp_path / "rep").iterdir()} == {
        "report.md",
        "normalised.png",
        "aggregates.png",
        "profile.png",
    }


def test_a_report_into_a_folder_of_an_earlier_one_leaves_none_of_its_figures(results, tmp_path):
    """A report of a file with no scored game wrote report.md beside the earlier report's figures,
    which then showed another run (from an outside review)."""
    data = json.loads(results.read_text())
    data["games"]["Pong"] = {"game": "Pong", "error": "boom", "excluded": False}
    failed = tmp_path / "failed.json"
    failed.write_text(json.dumps(data))
    out = tmp_path / "rep"
    assert main(["report", str(results), "--out", str(out)]) == 0
    assert (out / "profile.png").exists()
    assert main(["report", str(failed), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["report.md"]


def test_a_second_report_into_a_folder_being_written_is_refused(results, tmp_path, capsys):
    """From an outside review: two reports into one --out at once left one's report.md beside the
    other's figures (both exit 0), or one failed naming a figure whose temporary the other took.
    The first is a process holding the report's lock, as a report writing the folder does."""
    out = tmp_path / "rep"
    out.mkdir()
    with lock_held_elsewhere(tmp_path / ".rep.lock") as pid:
        assert main(["report", str(results), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"another process (pid {pid}) is writing" in err and err.count("\n") == 1, err
    assert not list(out.iterdir()), "nothing written beside the first's"
    assert main(["report", str(results), "--out", str(out)]) == 0, "the lock goes with its holder"


def _rederived(data: dict, name: str, g: dict) -> dict:
    """``g`` as run would write it for game ``name``: every derived field recomputed, so the only
    thing wrong with it is what the test changed."""
    from laya_eval.baselines import Baseline
    from laya_eval.evaluate import derived

    b = g["baseline"]
    baseline = Baseline(b["expert"], b["random"], b["source"], b["cap"])
    return {**g, "game": name, **derived(name, g["scores"], baseline, data["settings"]["cap"], g["random"]["mean"])}


@pytest.mark.parametrize("wrong", ["a game ALE does not have", "the reference table misquoted"])
def test_a_results_file_that_agrees_with_itself_but_not_with_the_facts_is_one_line(results, tmp_path, wrong):
    """Both were reported as scored: a game Zzz counted in the IQM, and Pong's expert baseline of -19
    shown beside the name of the table that says 5.4 (an outside hostile review)."""
    data = json.loads(results.read_text())
    pong = data["games"]["Pong"]
    assert pong["baseline"]["source"].startswith("reference table")
    if wrong == "a game ALE does not have":
        data["games"]["Zzz"] = _rederived(data, "Zzz", pong)
        field = "games.Zzz"
    else:
        data["games"]["Pong"] = _rederived(data, "Pong", {**pong, "baseline": {**pong["baseline"], "expert": -19.0}})
        field = "games.Pong.baseline"
    bad = tmp_path / "r.json"
    bad.write_text(json.dumps(data))
    code, err = check_promises(main, ["report", bad], sandbox=tmp_path, target=None)
    assert code == 2 and f"r.json: {field}: " in err, err
    code, err = check_promises(main, ["compare", results, bad], sandbox=tmp_path, target=None)
    assert code == 2 and f"r.json: {field}: " in err, err


def test_compare_of_files_with_no_game_in_common_is_one_line(results, tmp_path):
    """It was a table of no rows, no P(B > A) and an empty figure, with exit 0."""
    data = json.loads(results.read_text())
    from laya_eval.baselines import REFERENCE

    boxing = {**data["games"]["Pong"], "baseline": REFERENCE["Boxing"].to_dict()}
    data["games"] = {"Boxing": _rederived(data, "Boxing", boxing)}
    other = tmp_path / "other.json"
    other.write_text(json.dumps(data))
    out = tmp_path / "cmp"
    code, err = check_promises(main, ["compare", results, other, "--out", out], sandbox=tmp_path, target=out)
    assert code == 2 and "no game in common" in err and not out.exists(), err
