import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from laya_eval.baselines import REFERENCE, Baseline, choose_baseline, flags_for, normalise, read_meta_baselines
from laya_eval.cli import main
from laya_eval.errors import EvalError
from laya_eval.evaluate import RunConfig, evaluate, load_results, play_game
from laya_eval.policies import load_policy

from ..processes import as_from_a_terminal, deaf_to_ctrl_c, ended

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
FAST = dict(episodes=2, random_episodes=2, cap=80)


def run(tmp_path, policy, games=("Pong",), **kw):
    cfg = RunConfig(policy=policy, games=list(games), out=str(tmp_path / "results.json"), **{**FAST, **kw})
    return evaluate(cfg, progress=False)


def test_results_file_has_protocol_policy_games_and_summary(tmp_path):
    res = run(tmp_path, "random", games=("Pong", "Breakout"))
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["games"].keys() == {"Pong", "Breakout"}
    assert on_disk["protocol"]["repeat_action_probability"] == 0.25 and on_disk["protocol"]["decision_cap"] == 80
    g = res["games"]["Pong"]
    assert len(g["scores"]) == 2 and len(g["random"]["scores"]) == 2 and g["baseline"]["source"].startswith("reference")
    assert g["normalised"] == pytest.approx((g["mean"] + 20.2) / (5.4 + 20.2))
    assert g["protocol"]["env_id"] == "ALE/Pong-v5"
    assert res["summary"]["counts"]["games"] == 2 and res["summary"]["all"]["iqm_ci95"]


@contextlib.contextmanager
def _caught_waiting(tmp_path, games: list[str]):
    """A results file of Pong, then a run extending it to ``games`` in a thread, caught waiting at
    Breakout's reset until the block ends: (the file, the run's config)."""
    import threading

    results, go = tmp_path / "results.json", tmp_path / "go"
    cfg = RunConfig(
        policy="tests.laya_eval.fake_policies:waits_on",
        policy_kwargs={"game": "Breakout", "go": str(go)},
        games=["Pong"],
        out=str(results),
        episodes=1,
        random_episodes=0,
        cap=30,
    )
    evaluate(cfg, progress=False)
    cfg.games = games
    playing = threading.Thread(target=evaluate, args=(cfg,), kwargs={"progress": False})
    playing.start()
    try:
        yield results, cfg
    finally:
        go.touch()
        playing.join(60)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + 60
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_report_of_a_run_not_finished_says_which_games_it_lacks(tmp_path, capsys):
    """report of a results file while its run still played (or after it was stopped) read as final:
    the same tables and summary as a finished run of the games scored so far. A rerun asked for
    fewer games finishes what it was asked."""
    with _caught_waiting(tmp_path, ["Pong", "Freeway", "Breakout"]) as (results, cfg):
        _until(lambda: "Freeway" in json.loads(results.read_text())["games"], "Freeway was never written")
        assert main(["report", str(results)]) == 0
        said = capsys.readouterr().out
        assert "Not finished: 1 game asked for is not yet scored (Breakout)" in said, said
        compared = tmp_path / "other.json"
        compared.write_text(results.read_text())
        assert main(["compare", str(compared), str(results)]) == 0
        assert "Not finished: A, 1 game asked for is not yet scored (Breakout)" in capsys.readouterr().out
    assert main(["report", str(results)]) == 0
    assert "not yet scored" not in capsys.readouterr().out
    cfg.games = ["Pong"]  # a later run asked for less: done at once, and the file says it is finished
    data = json.loads(results.read_text())
    results.write_text(json.dumps({**data, "pending": ["Seaquest"]}))  # as a stopped run of Seaquest left it
    evaluate(cfg, progress=False)
    assert json.loads(results.read_text())["pending"] == []


def test_an_extended_run_says_what_it_lacks_before_its_first_new_game(tmp_path):
    """The file is rewritten only after a game: a run stopped in its first new game left the file of
    the run before, which said it was finished."""
    with _caught_waiting(tmp_path, ["Pong", "Breakout"]) as (results, _):
        pending = lambda: json.loads(results.read_text()).get("pending") == ["Breakout"]  # noqa: E731
        _until(pending, "the file never said Breakout was asked for")
    assert json.loads(results.read_text())["pending"] == []


class _Right:
    """A policy as a notebook makes one: an object of a class of its own, no module to name."""

    def __call__(self, batch):
        return np.full(len(batch), list(batch.actions).index("RIGHT"))


def test_a_policy_object_is_judged_as_its_spec_would_be(tmp_path):
    """From a researcher's review: RunConfig(policy=obj), as the README's "a policy is a callable"
    suggests, failed with "'_Right' object has no attribute 'partition'"."""
    res = run(tmp_path, _Right(), random_episodes=0)
    assert res["policy"]["spec"] == "object:tests.laya_eval.test_evaluate._Right"
    assert {a for a, n in res["games"]["Pong"]["actions"].items() if n} == {"RIGHT"}
    before = (tmp_path / "results.json").read_text()
    run(tmp_path, _Right(), random_episodes=0)  # another object of the same class resumes the file
    assert (tmp_path / "results.json").read_text() == before
    for kw, said in (
        ({"policy_kwargs": {"a": 1}}, "--policy-kwargs: an object policy is made already"),
        ({"executor": "ray"}, "--executor: ray plays a policy named by its spec"),
    ):
        with pytest.raises(EvalError, match=said):
            run(tmp_path / "x", _Right(), **kw)
    with pytest.raises(EvalError, match="is not a policy spec"):
        run(tmp_path / "x", 7)
    # from an outside review: a class given for its object played nothing, and its spec, like a
    # function's, named a builtin type, which any other such callable shared and resumed
    with pytest.raises(EvalError, match="is a class: give the policy, an object of it"):
        run(tmp_path / "x", _Right)
    assert RunConfig(policy=_right, games=["Pong"]).spec == "object:tests.laya_eval.test_evaluate._right"
    assert RunConfig(policy=_Right().__call__, games=["Pong"]).spec == "object:tests.laya_eval.test_evaluate._Right"
    import functools

    assert RunConfig(policy=functools.partial(_right), games=["Pong"]).spec.endswith("test_evaluate._right")
    # the recorded spec of an object, given on the command line, cannot load one: refused before the file changes
    with pytest.raises(EvalError, match="an object policy is played from Python"):
        run(tmp_path, "object:tests.laya_eval.test_evaluate._Right")
    assert (tmp_path / "results.json").read_text() == before
    played = []
    cfg = RunConfig(policy=_right, games=["Pong"], out=str(tmp_path / "r2.json"), episodes=1, random_episodes=0, cap=20)
    played.append(play_game(cfg, "Pong"))  # the unit of work, as its own caller
    assert played[0]["scores"]


def _right(batch):
    return np.full(len(batch), list(batch.actions).index("RIGHT"))


def test_rerun_skips_finished_games_and_other_settings_are_refused(tmp_path):
    run(tmp_path, "random")
    before = (tmp_path / "results.json").read_text()
    run(tmp_path, "random")
    assert (tmp_path / "results.json").read_text() == before, "nothing replayed"
    run(tmp_path, "random", games=("Pong", "Freeway"))
    assert load_results(tmp_path / "results.json")["games"].keys() == {"Pong", "Freeway"}
    with pytest.raises(EvalError, match=r"other settings \(episodes\)"):
        run(tmp_path, "random", episodes=3)
    assert len(run(tmp_path, "random", episodes=3, restart=True)["games"]["Pong"]["scores"]) == 3


@pytest.mark.parametrize(
    "factory,message",
    [
        ("raising", "raised RuntimeError: model exploded"),
        ("out_of_range", "returned action 99, out of range for"),
        ("nan_probs", "non-finite probabilities"),
        ("wrong_batch", "returned shape (3,) (int64) for a batch of 2"),
    ],
)
def test_misbehaving_policies_are_recorded_per_game(tmp_path, capsys, factory, message):
    rc = main(
        [
            "run",
            "--policy",
            f"tests.laya_eval.fake_policies:{factory}",
            "--games",
            "Pong,Freeway",
            "--episodes",
            "2",
            "--cap",
            "40",
            "--random-episodes",
            "0",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 1 and message in err and "Traceback" not in err
    res = load_results(tmp_path / "r.json")
    assert message in res["games"]["Pong"]["error"] and message in res["games"]["Freeway"]["error"]
    assert res["summary"]["failed"] == ["Freeway", "Pong"]


def _run_argv(tmp_path, factory, kwargs=None):
    return [
        "run",
        "--policy",
        f"tests.laya_eval.fake_policies:{factory}",
        *(["--policy-kwargs", json.dumps(kwargs)] if kwargs else []),
        "--games",
        "Pong",
        "--episodes",
        "1",
        "--cap",
        "3",
        "--random-episodes",
        "0",
        "--out",
        str(tmp_path / "r.json"),
    ]


@pytest.mark.parametrize(
    "factory,message",
    [
        ("reset_raises", "reset raised ValueError: reset failed"),
        ("unprintable", "raised _Unprintable"),
        ("array_raises", "not an array (_Unprintable"),
        ("exits", "raised SystemExit"),
    ],
)
def test_an_in_process_policy_raising_anything_fails_its_game_on_one_line(tmp_path, capsys, factory, message):
    """Each was a traceback out of laya-eval run (an outside review's cases)."""
    rc = main(_run_argv(tmp_path, factory))
    err = capsys.readouterr().err
    assert rc == 1 and message in err and "Traceback" not in err, err
    assert message in load_results(tmp_path / "r.json")["games"]["Pong"]["error"]


@pytest.mark.parametrize(
    "factory,code,message",
    [
        ("close_raises", 0, "warning: the policy's close() raised RuntimeError: close failed"),
        ("identity_raises", 2, "policy.identity: RuntimeError: identity failed"),
        ("identity_exits", 2, "policy.identity: SystemExit"),
        ("identity_not_json", 2, "policy.identity: is not a JSON object of plain data"),
    ],
)
def test_a_policy_whose_close_or_identity_fails_keeps_the_results_whole(tmp_path, capsys, factory, code, message):
    rc = main(_run_argv(tmp_path, factory))
    err = capsys.readouterr().err
    assert rc == code and message in err and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"], "no temporary or lock file left"
    json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the results"))
    assert load_results(tmp_path / "r.json")["games"]["Pong"]["error"] is None


def test_a_policy_that_changes_directory_does_not_move_the_results(tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(tmp_path)
    argv = _run_argv(tmp_path, "changes_directory", {"scratch": str(elsewhere)})
    argv[argv.index("--out") + 1] = "r.json"
    assert main(argv) == 0
    assert (tmp_path / "r.json").exists() and not list(elsewhere.iterdir())


def test_other_games_still_run_after_a_failure(tmp_path, capsys):
    rc = main(
        [
            "run",
            "--policy",
            "tests.laya_eval.fake_policies:fails_on",
            "--policy-kwargs",
            '{"game": "Pong"}',
            "--games",
            "Pong,Freeway",
            "--episodes",
            "2",
            "--cap",
            "40",
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    assert rc == 1
    res = load_results(tmp_path / "r.json")
    assert "cannot play Pong" in res["games"]["Pong"]["error"]
    assert res["games"]["Freeway"]["error"] is None and len(res["games"]["Freeway"]["scores"]) == 2


def test_stdio_policy_and_the_standalone_example(tmp_path):
    example = ROOT / "packages/laya-eval/examples/stdio_policy.py"
    assert "laya_eval" not in example.read_text().split('"""', 2)[2], "the example must not import laya-eval"
    res = run(tmp_path, f"cmd:{sys.executable} {example}", games=("Breakout",), episodes=2)
    g = res["games"]["Breakout"]
    assert g["error"] is None and sum(g["actions"].values()) == sum(g["steps"])
    assert res["policy"]["identity"] == {"name": "brightest-column", "version": 1}


def test_a_c_policy_written_from_the_docs_plays_as_its_python_twin(tmp_path):
    """tests/laya_eval/stdio_policy.c was written from docs/formats.md alone; it must choose exactly
    what the same rule chooses in-process, so it reads the frames, their order and the actions right."""
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no C compiler on this machine (cc, gcc or clang) to build tests/laya_eval/stdio_policy.c")
    binary = tmp_path / "stdio_policy"
    subprocess.run([cc, "-O2", "-o", str(binary), str(HERE / "stdio_policy.c")], check=True, capture_output=True)
    games = ("Breakout", "Pong")
    c = run(tmp_path / "c", f"cmd:{binary}", games=games, random_episodes=0)
    twin = run(tmp_path / "py", "tests.laya_eval.fake_policies:brightest_column", games=games, random_episodes=0)
    assert c["policy"]["identity"] == {"name": "c-brightest-column", "language": "C"}
    for game in games:
        a, b = c["games"][game], twin["games"][game]
        assert a["error"] is None, a["error"]
        assert (a["scores"], a["steps"], a["actions"]) == (b["scores"], b["steps"], b["actions"]), game
        assert len([n for n, k in a["actions"].items() if k]) >= 2, "the rule used more than one button"


def test_the_full_action_set_gives_every_policy_all_18_buttons(tmp_path):
    from laya_protocol.games import FULL_ACTIONS, minimal_actions

    from .fake_policies import Recorder

    rec = Recorder(action=17)  # DOWNLEFTFIRE: not in Pong's minimal set
    assert FULL_ACTIONS[17] not in minimal_actions("Pong")
    cfg = RunConfig(
        policy="random", games=["Pong"], out=str(tmp_path / "r.json"), action_set="full", **{**FAST, "episodes": 1}
    )
    from laya_eval.evaluate import play_game

    g = play_game(cfg, "Pong", rec)
    assert rec.resets == [("Pong", FULL_ACTIONS)]
    assert g["protocol"]["action_set"] == "full" and g["actions"][FULL_ACTIONS[17]] == g["steps"][0]
    res = evaluate(cfg, progress=False)
    assert res["protocol"]["action_set"] == "full" and res["settings"]["action_set"] == "full"
    with pytest.raises(EvalError, match="was made with other settings \\(action_set\\)"):
        evaluate(RunConfig(policy="random", games=["Pong"], out=str(tmp_path / "r.json"), **{**FAST, "episodes": 1}))
    with pytest.raises(EvalError, match="UP is not a button of Pong in the minimal set"):
        RunConfig(policy="constant:UP", games=["Pong"])
    assert RunConfig(policy="constant:UP", games=["Pong"], action_set="full").action_set == "full"


def test_results_record_the_emulator_and_a_resume_with_another_is_refused(tmp_path):
    import hashlib

    import ale_py
    from ale_py import roms

    res = run(tmp_path, "random", games=("Pong",))
    path = tmp_path / "results.json"
    assert res["emulator"] == {"ale_py": ale_py.__version__} and res["laya_eval"] and len(res["date"]) == 10
    assert res["games"]["Pong"]["rom_md5"] == hashlib.md5(open(roms.get_rom_path("pong"), "rb").read()).hexdigest()
    for where, value in ((("emulator", "ale_py"), "0.7.5"), (("games", "Pong", "rom_md5"), "0" * 32)):
        doc = json.loads(path.read_text())
        *parents, key = where
        node = doc
        for k in parents:
            node = node[k]
        original, node[key] = node[key], value
        path.write_text(json.dumps(doc))
        with pytest.raises(EvalError) as e:
            run(tmp_path, "random", games=("Pong", "Breakout"))
        assert value in str(e.value) and "--restart" in str(e.value)
        node[key] = original
        path.write_text(json.dumps(doc))
    assert "Breakout" in run(tmp_path, "random", games=("Pong", "Breakout"))["games"]


def test_intervals_say_how_they_were_made_and_warn_when_they_collapse(tmp_path):
    one = run(tmp_path / "one", "random", games=("Pong", "Breakout"), episodes=1)
    iv = one["summary"]["intervals"]
    assert iv["bootstrap"] == "episode" and "every game has one episode" in iv["warning"]
    for key in ("median", "mean", "iqm", "optimality_gap"):
        lo, hi = one["summary"]["all"][f"{key}_ci95"]
        assert lo == hi, "one episode a game: nothing to resample"
    from laya_eval.report import markdown

    assert "Warning: every game has one episode" in markdown(one)
    assert "1 episode per game," in markdown(one), markdown(one)  # not "1 episodes"
    task = load_results(tmp_path / "one" / "results.json", bootstrap="task")
    assert task["summary"]["intervals"]["bootstrap"] == "task"
    lo, hi = task["summary"]["all"]["mean_ci95"]
    assert lo < hi, "resampling games gives an interval even with one episode each"
    assert "task bootstrap over games" in markdown(task)


def test_a_run_at_another_cap_says_why_nothing_is_unflagged(tmp_path):
    res = run(tmp_path, "random", games=("Pong", "Breakout"), cap=50)
    sm = res["summary"]
    # the cap in brackets is the baselines', which the note said was this run's (a researcher's review)
    assert sm["counts"]["unflagged"] == 0 and "other than this run's (theirs: 4500)" in sm["note"], sm["note"]
    assert "--cap 4500" in sm["note"]
    # baselines a dataset measured at cap 100: the note advised the reference table's 4,500 all the same
    from laya_eval.evaluate import derived, summarise

    games = res["games"]
    for name, g in games.items():
        b = Baseline(g["baseline"]["expert"], g["baseline"]["random"], "data/meta.json (expert)", 100)
        g.update(baseline=b.to_dict(), **derived(name, g["scores"], b, 50, g["random"]["mean"]))
    note = summarise(games)["note"]
    assert "--cap 100," in note and "4500" not in note, note


def test_compare_refuses_other_protocols_and_uses_raw_scores_across_baselines(tmp_path, capsys):
    a = run(tmp_path / "a", "random", games=("Pong",))
    path_a = tmp_path / "a" / "results.json"
    doc = json.loads(path_a.read_text())
    g = doc["games"]["Pong"]
    # the same play, another baseline (not the reference table's: a file quoting it must quote it right)
    g["baseline"] = {**g["baseline"], "expert": g["baseline"]["expert"] * 10, "source": "another table"}
    e, r = g["baseline"]["expert"], g["baseline"]["random"]
    g["normalised_scores"] = [(s - r) / (e - r) for s in g["scores"]]
    g["normalised"] = (g["mean"] - r) / (e - r)
    (tmp_path / "b.json").write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["compare", str(path_a), str(tmp_path / "b.json"), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "P(B > A) = 0.500 [0.500, 0.500]" in out, out  # identical play: no improvement either way
    assert "different baselines" in out and (tmp_path / "cmp" / "improvement.png").is_file()
    doc["emulator"] = {"ale_py": "0.7.5"}
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert main(["compare", str(path_a), str(tmp_path / "old.json")]) == 2
    assert "B with 0.7.5; compare runs of one emulator" in capsys.readouterr().err
    doc["emulator"] = "0.7.5"  # not what laya-eval writes: one line, never a traceback
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert "emulator: is not a mapping" in capsys.readouterr().err
    run(tmp_path / "c", "random", games=("Pong",), cap=60)
    assert main(["compare", str(path_a), str(tmp_path / "c" / "results.json")]) == 2
    err = capsys.readouterr().err
    assert "different protocols (decision_cap: 80 against 60)" in err and err.count("\n") == 1
    assert a["games"]["Pong"]["error"] is None


def test_hung_subprocess_is_killed_at_its_timeout(tmp_path):
    t = time.time()
    res = run(tmp_path, f"cmd:{sys.executable} {HERE / 'hanging_policy.py'}", timeout=1.5)
    assert "no answer to 'act' within 1.5s; killed" in res["games"]["Pong"]["error"]
    assert time.time() - t < 30


def unruly(tmp_path, mode: str) -> str:
    return f"cmd:{sys.executable} {HERE / 'unruly_policy.py'} {mode} {tmp_path}"


def test_a_policy_that_stops_reading_its_input_is_killed_at_the_timeout(tmp_path):
    t = time.time()
    res = run(tmp_path, unruly(tmp_path, "deaf"), timeout=1.5, random_episodes=0)
    assert "did not read the 'act' message" in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]
    assert time.time() - t < 30 and (tmp_path / "results.json").exists()


def test_a_policy_that_closes_its_output_and_lives_on_is_killed_at_the_timeout(tmp_path):
    """Its output's end was taken for an exit, and the judge waited for the exit without a limit."""
    t = time.time()
    res = run(tmp_path, unruly(tmp_path, "mute"), timeout=1.5, random_episodes=0)
    assert "closed its output" in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]
    assert time.time() - t < 30 and (tmp_path / "results.json").exists()


def test_an_answer_that_is_not_standard_json_is_charged_to_its_game(tmp_path):
    """NaN and 1e999 were read as numbers and written into the results, which strict readers refuse."""
    res = run(tmp_path, unruly(tmp_path, "nan"), random_episodes=0)
    assert "not standard JSON" in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]
    json.loads((tmp_path / "results.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in the results"))


def test_a_large_answer_is_read_whole_and_an_endless_line_is_cut_at_the_line_limit(tmp_path):
    """Answers were read a byte at a time (1.6 MB/s): 16 MB took 10 s. A line is at most 64 MB."""
    from laya_eval.stdio import MAX_LINE

    assert MAX_LINE == 64 << 20
    res = run(tmp_path, unruly(tmp_path, "big"), timeout=5, episodes=1, random_episodes=0)
    assert res["games"]["Pong"]["error"] is None, res["games"]["Pong"]["error"]
    res = run(tmp_path / "endless", unruly(tmp_path, "endless"), timeout=60, episodes=1, random_episodes=0)
    assert "over the 64 MB a line may be" in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]


def test_lines_nobody_asked_for_are_held_to_a_few_in_memory(tmp_path):
    """Every line a policy wrote was queued until the next message: one that floods at close (or
    while the judge plays the random baseline) took the judge to 2 GB in the 5 s it waits."""
    watch = "import resource, subprocess, sys; subprocess.run(sys.argv[1:]); "
    watch += "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"  # KB: the judge's peak
    judge = ["-m", "laya_eval.cli", "run", "--policy", unruly(tmp_path, "flood"), "--games", "Pong"]
    judge += ["--episodes", "1", "--cap", "20", "--random-episodes", "0", "--out", str(tmp_path / "r.json")]
    done = subprocess.run([sys.executable, "-c", watch, sys.executable, *judge], capture_output=True, text=True)
    peak_kb = int(done.stdout.split()[-1])
    assert json.loads((tmp_path / "r.json").read_text())["games"]["Pong"]["error"] is None
    assert peak_kb < 1_000_000, f"{peak_kb / 1e6:.2f} GB"


def test_an_identity_past_64_kb_is_refused_not_written(tmp_path):
    """A 24 MB name was written as 72 MB of escapes: a results file its own report and resume refuse."""
    with pytest.raises(EvalError, match=r"policy\.identity: .*over the 64 KB"):
        run(tmp_path, unruly(tmp_path, "bigname"), episodes=1, random_episodes=0)
    assert "identity" not in json.loads((tmp_path / "results.json").read_text())["policy"]


def test_a_resume_by_a_policy_that_says_it_is_another_is_refused(tmp_path, monkeypatch):
    """Pong played by one policy and Breakout by another were one results file, the second's name on both."""
    monkeypatch.setenv("UNRULY_NAME", "v1")
    run(tmp_path, unruly(tmp_path, "calm"), episodes=1, random_episodes=0)
    monkeypatch.setenv("UNRULY_NAME", "v2")
    with pytest.raises(EvalError, match=r'policy\.identity: .*"v1".*"v2"'):
        run(tmp_path, unruly(tmp_path, "calm"), games=("Pong", "Breakout"), episodes=1, random_episodes=0)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["policy"]["identity"] == {"name": "v1"} and list(on_disk["games"]) == ["Pong"]


def test_a_module_attr_policy_beside_the_user_is_found(tmp_path, monkeypatch):
    """The README's `--policy mymodule:make_policy`, with mymodule.py in the current folder, was
    "No module named 'mymodule'": a console script's import path does not hold the current folder."""
    (tmp_path / "beside_the_user.py").write_text(
        "from laya_eval.policies import RandomPolicy\n\ndef make_policy(**kwargs):\n    return RandomPolicy(**kwargs)\n"
    )
    monkeypatch.chdir(tmp_path)
    policy = load_policy("beside_the_user:make_policy", {"seed": 3})
    assert type(policy).__name__ == "RandomPolicy" and str(tmp_path) not in sys.path
    with pytest.raises(EvalError, match="cannot import 'not_beside_anyone'"):
        load_policy("not_beside_anyone:make_policy")


def test_an_answer_without_its_newline_is_not_an_answer(tmp_path):
    """A policy that wrote an answer and exited before its newline was taken as having answered."""
    res = run(tmp_path, unruly(tmp_path, "cut"), episodes=1, random_episodes=0)
    assert "without the newline" in (res["games"]["Pong"]["error"] or ""), res["games"]["Pong"]["error"]


def test_an_action_past_64_bits_is_named_as_out_of_range(tmp_path):
    """It was 'raised OverflowError', as if the policy had raised, without the value."""
    res = run(tmp_path, unruly(tmp_path, "hugeact"), episodes=1, random_episodes=0)
    assert "action 100000000000... (31 digits), out of range for 6 actions" in res["games"]["Pong"]["error"]


def test_probabilities_whose_sum_overflows_are_drawn_as_their_ratios():
    """A row of [1e308, 1e308, 0, ...] summed to inf: every probability became 0 and each draw fell
    to the last action, which the policy gave no weight."""
    from laya_eval.batch import Batch, choose

    n, actions = 400, ("NOOP", "FIRE", "RIGHT", "LEFT")
    frames = np.zeros((n, 1, 1, 3), np.uint8)
    batch = Batch("Pong", actions, frames, frames, np.zeros(n, bool), np.arange(n))
    probs = np.zeros((n, 4))
    probs[:, :2] = 1e308
    drawn = choose(probs, batch, greedy=False, rng=np.random.default_rng(0))
    assert set(drawn.tolist()) == {0, 1}


def test_a_game_named_twice_is_played_once():
    """Pong,pong,PONG reset and played Pong three times for one entry in the results."""
    assert RunConfig(policy="random", games=["Pong", "pong", "PONG", "Breakout"]).games == ["Pong", "Breakout"]


def test_a_hello_nested_past_any_parser_is_charged_to_its_game(tmp_path):
    """It was a RecursionError traceback out of laya-eval run."""
    res = run(tmp_path, unruly(tmp_path, "deep"), random_episodes=0)
    assert "not a JSON line" in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]


@pytest.mark.parametrize(
    "mode,message",
    [
        ("crash", "exited"),
        ("stray", "not a JSON line"),
        ("odd", "expected 'actions' or 'probs'"),
        ("twice", "without being asked"),
    ],
)
def test_one_failure_is_charged_to_its_own_game_and_the_next_starts_clean(tmp_path, mode, message):
    res = run(tmp_path, unruly(tmp_path, mode), games=("Pong", "Breakout"), episodes=1, random_episodes=0)
    assert message in res["games"]["Pong"]["error"], res["games"]["Pong"]["error"]
    assert res["games"]["Breakout"]["error"] is None, "a fresh process and hello for the next game"
    assert (tmp_path / "hellos").read_text().count("hello") == 2, "the next game got a process of its own"


@pytest.mark.parametrize(
    "mode,message",
    [
        ("dupkey", "key 'actions' given twice"),
        ("both", "both 'actions' and 'probs'"),
        ("strprobs", "probabilities that are not numbers"),
        ("boolprobs", "probabilities that are not numbers"),
        ("notok", "answered reset with"),
        ("manyempty", "JSON values"),
    ],
)
def test_an_answer_read_one_way_of_several_fails_its_game(tmp_path, mode, message):
    """Each was played: the last of two "actions" won, actions beside probs won, "1" and true were
    read as numbers, {"ok": false} was taken for ready, and 300,000 empty rows were parsed (63 MB of
    them took the judge to 2.4 GB) before their shape was refused."""
    res = run(tmp_path, unruly(tmp_path, mode), episodes=1, random_episodes=0, cap=5)
    assert message in (res["games"]["Pong"]["error"] or ""), res["games"]["Pong"]["error"]


def test_an_answer_nobody_asked_for_at_a_games_end_is_charged_to_that_game(tmp_path, monkeypatch):
    """It was blamed on the next game, and after the last game on none."""
    monkeypatch.setenv("UNRULY_LAST", "5")  # one episode capped at 5 decisions: its fifth act is its last
    res = run(tmp_path, unruly(tmp_path, "lasttwice"), games=("Pong", "Breakout"), episodes=1, random_episodes=0, cap=5)
    assert "without being asked" in (res["games"]["Pong"]["error"] or ""), res["games"]["Pong"]["error"]
    assert res["games"]["Breakout"]["error"] is None
    res = run(tmp_path / "b", unruly(tmp_path, "lasttwice"), games=("Breakout", "Pong"), episodes=1, cap=5)
    assert res["games"]["Breakout"]["error"] is None
    assert "without being asked" in (res["games"]["Pong"]["error"] or ""), res["games"]["Pong"]["error"]


def test_a_policy_cannot_rewrite_the_results_after_the_judges_last_write(tmp_path, monkeypatch):
    """The judge wrote its last game, then waited for the policy to exit: long enough to forge it."""
    monkeypatch.setenv("UNRULY_OUT", str(tmp_path / "results.json"))
    res = run(tmp_path, unruly(tmp_path, "forge"), episodes=1, random_episodes=0, cap=5)
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["games"]["Pong"]["scores"] == res["games"]["Pong"]["scores"] != [21.0]


def test_a_policys_error_text_is_cut_and_its_control_characters_escaped(tmp_path, capsys):
    """1 MB of error text went into the results (84 MB of them made a file report refused), and a
    terminal escape, a carriage return and a right-to-left override reached the terminal as they were."""
    out = tmp_path / "r.json"
    assert (
        main(
            ["run", "--policy", unruly(tmp_path, "saywhat"), "--games", "Pong", "--episodes", "1"]
            + ["--random-episodes", "0", "--cap", "5", "--out", str(out)]
        )
        == 1
    )
    said = json.loads(out.read_text())["games"]["Pong"]["error"]
    assert len(said) < 400 and r"\x1b[2J\rall games passed\u202e" in said, said[:100]
    err = capsys.readouterr().err
    assert r"\x1b" in err and not any(c in err for c in "\x1b\r\u202e"), err[:300]
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    shown = capsys.readouterr().out + (tmp_path / "rep" / "report.md").read_text()
    assert "all games passed" in shown and not any(c in shown for c in "\x1b\r\u202e")


def test_a_policy_restarted_after_a_failure_may_say_another_identity(tmp_path, monkeypatch, capsys):
    """Its new pid made the judge refuse its own run as another player's (exit 2, the next game
    played and thrown away), and advise --restart, which met the same refusal."""
    monkeypatch.setenv("UNRULY_PID", "1")
    res = run(tmp_path, unruly(tmp_path, "crash"), games=("Pong", "Breakout"), episodes=1, random_episodes=0)
    assert "exited" in res["games"]["Pong"]["error"] and res["games"]["Breakout"]["error"] is None
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["games"].keys() == {"Pong", "Breakout"} and on_disk["policy"]["identity"]["name"] == "crash"
    assert "another identity" in capsys.readouterr().err


def test_a_folder_planted_where_the_results_are_staged_is_no_failure(tmp_path):
    """The staging name was fixed: a folder there ended the run after its first game, with exit 2."""
    planted = tmp_path / ".results.json.tmp" / "x"
    planted.mkdir(parents=True)
    res = run(tmp_path, "random", games=("Pong", "Breakout"), episodes=1, random_episodes=0, cap=5)
    assert json.loads((tmp_path / "results.json").read_text())["games"].keys() == res["games"].keys()
    assert planted.is_dir() and not list(tmp_path.glob(".results.json.*.tmp")), "no staging file left"


def test_policy_kwargs_for_a_cmd_policy_are_refused_not_recorded_unused(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["run", "--policy", unruly(tmp_path, "calm"), "--policy-kwargs", '{"temperature": 0.1}']
    assert main([*args, "--games", "Pong", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--policy-kwargs" in err and "cmd:" in err and err.count("\n") == 1, err
    assert not out.exists() and not (tmp_path / "hellos").exists()


def test_a_cmd_policy_that_cannot_be_split_or_is_empty_is_one_line(tmp_path, capsys):
    for spec, message in (('cmd:python3 "x', "cannot be split into words"), ("cmd:  ", "names no command")):
        assert main(["run", "--policy", spec, "--games", "Pong", "--out", str(tmp_path / "r.json")]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "r.json").exists()


def test_the_full_action_set_adds_no_auto_fire_to_a_game_without_fire(tmp_path):
    from .fake_policies import Recorder

    first = {}
    for kind in ("minimal", "full"):
        rec = Recorder()
        cfg = RunConfig(policy="random", games=["Freeway"], out=str(tmp_path / f"{kind}.json"), action_set=kind, **FAST)
        from laya_eval.evaluate import play_game

        play_game(cfg, "Freeway", rec)
        first[kind] = rec.batches[0][0]
    assert np.array_equal(first["minimal"], first["full"]), "the same screen at the first decision: no FIRE pressed"


@pytest.mark.parametrize("mode", ["forks", "setsid", "daemon"])
def test_a_killed_policy_takes_its_children_with_it(tmp_path, mode):
    """Its child in its process group, in a session of its own (found by parentage), and in one of
    its own after its parent exited (found by the mark in its environment): each is ended."""
    res = run(tmp_path, unruly(tmp_path, mode), timeout=1.5, episodes=1, random_episodes=0)
    assert "no answer to 'act'" in res["games"]["Pong"]["error"]
    assert_ended(int((tmp_path / "child.pid").read_text()))


def test_a_policy_child_that_forks_and_exits_in_a_loop_is_ended(tmp_path):
    """Its number changes every fork, faster than a pass over /proc: only a reaper that every orphan
    falls to can end it. The loop ends itself after 20 s, so a failure leaves nothing behind for long."""
    res = run(tmp_path, unruly(tmp_path, "forkloop"), timeout=1.5, episodes=1, random_episodes=0)
    assert "no answer to 'act'" in res["games"]["Pong"]["error"]
    beat = tmp_path / "loop.pid"
    first = beat.read_bytes()
    time.sleep(1.0)
    assert beat.read_bytes() == first, "the fork loop outlived the judge"


def assert_ended(pid: int) -> None:
    """``pid`` ends within 5 s (a killed process waits as a zombie until its parent reaps it); else it
    is killed here and the test fails."""
    for _ in range(50):
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith(("Z", "X")):
                return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"the policy's child {pid} outlived it")


@pytest.mark.parametrize("mode", ["setsid", "holdfd"])
def test_a_judge_killed_mid_run_takes_the_policy_and_its_children_with_it(tmp_path, mode):
    """SIGKILL runs no cleanup in the judge; the policy's reaper sees its end of the socket close, which
    a policy cannot open again through /proc as it could a pipe (holdfd)."""
    cmd = [sys.executable, "-m", "laya_eval.cli", "run", "--policy", unruly(tmp_path, mode), "--games", "Pong"]
    cmd += ["--episodes", "1", "--random-episodes", "0", "--out", str(tmp_path / "r.json")]
    judge = subprocess.Popen(cmd, env=ENV, stderr=subprocess.DEVNULL)
    pid_file, deadline = tmp_path / "child.pid", time.time() + 60
    while time.time() < deadline and not pid_file.exists():
        time.sleep(0.05)
    time.sleep(0.2)  # the pid is written before the file closes
    judge.kill()
    judge.wait()
    assert_ended(int(pid_file.read_text()))


@pytest.mark.parametrize(
    ("executor", "started"),
    [
        ("local", as_from_a_terminal),
        pytest.param("ray", as_from_a_terminal, marks=pytest.mark.slow),
        pytest.param("ray", deaf_to_ctrl_c, marks=pytest.mark.slow),
    ],
    ids=["local", "ray", "ray-as-a-background-job"],
)
def test_a_judge_stopped_by_sigterm_says_so_and_leaves_no_lock(tmp_path, executor, started):
    """SIGTERM (a scheduler's stop) ends the judge as a Ctrl-C does: one line, exit 143, the policy and
    its children ended, and the results file's lock removed (by Python's default it stayed). On Ray
    too, whose ``ray.init`` had taken SIGTERM over: its handler exited with code 15 and its C++ one
    printed a stack dump. A judge started as a background job (SIGINT ignored) gave its Ray workers
    the ignored SIGINT: Ray's interrupt did nothing, each worker was killed, and the policy's child
    lived on."""
    if executor == "ray":
        pytest.importorskip("ray", reason="Ray is an optional extra ([ray])")
    out = tmp_path / "r.json"
    cmd = [sys.executable, "-m", "laya_eval.cli", "run", "--policy", unruly(tmp_path, "setsid"), "--games", "Pong"]
    cmd += ["--episodes", "1", "--random-episodes", "0", "--out", str(out), "--executor", executor]
    env = {k: v for k, v in ENV.items() if k != "RAY_ADDRESS"}  # a local Ray of its own
    judge = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True, preexec_fn=started)
    pid_file, deadline = tmp_path / "child.pid", time.time() + 60
    while time.time() < deadline and not pid_file.exists():
        time.sleep(0.05)
    time.sleep(0.2)  # the pid is written before the file closes
    judge.send_signal(signal.SIGTERM)
    _, err = ended(judge)
    assert judge.returncode == 128 + signal.SIGTERM, err
    said = err.strip().splitlines()  # Ray's start-up lines too came first
    assert said == ["terminated (SIGTERM); the same command again resumes from the results file"], err
    assert not (tmp_path / ".r.json.lock").exists(), "the results file's lock was left"
    assert_ended(int(pid_file.read_text()))


def test_a_policy_that_kills_its_own_group_at_close_leaves_nothing(tmp_path):
    """A shell policy's `trap 'kill 0' EXIT` signals its process group; had the reaper been in it, the
    child it left (out of the group, its environment empty: nothing else finds it) would live on."""
    res = run(tmp_path, unruly(tmp_path, "groupkill"), episodes=1, random_episodes=0)
    assert res["games"]["Pong"]["error"] is None, res["games"]["Pong"]
    assert_ended(int((tmp_path / "child.pid").read_text()))


def test_a_policy_starts_with_the_default_signal_actions(tmp_path):
    """Python ignores SIGPIPE and SIGXFSZ, and an ignored signal stays ignored across exec; a policy
    started from Python must not inherit that (a shell policy's `producer | head -1` would never end).
    A shell policy, since a Python one ignores SIGPIPE of its own accord."""
    from laya_eval.stdio import StdioPolicy

    script = tmp_path / "policy.sh"
    script.write_text(
        "#!/bin/sh\n"
        "read line\n"
        'printf \'{"name": "sh", "ignored": "%s"}\\n\' "$(awk \'/^SigIgn/ {print $2}\' /proc/self/status)"\n'
        'while read line; do case "$line" in *close*) exit 0;; esac; echo \'{"ok": true}\'; done\n'
    )
    script.chmod(0o755)
    policy = StdioPolicy(str(script), timeout=30)
    try:
        policy.reset("Pong", ["NOOP"])
        ignored = int(policy.identity["ignored"], 16)
    finally:
        policy.close()
    assert not ignored & (1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)), hex(ignored)


@pytest.mark.parametrize("lc_ctype", [None, "C"])
def test_a_policy_gets_the_judges_environment_and_its_mark(tmp_path, monkeypatch, lc_ctype):
    """The reaper runs isolated (`python -I`), which ignores PYTHONCOERCECLOCALE=0: under the C
    locale it set LC_CTYPE=C.UTF-8 in its own environment (or in place of LC_CTYPE=C), and the
    policy inherited it."""
    from laya_eval.stdio import MARK, StdioPolicy

    for name in ("LC_ALL", "LC_CTYPE"):
        monkeypatch.delenv(name, raising=False)
    if lc_ctype is not None:
        monkeypatch.setenv("LC_CTYPE", lc_ctype)
    monkeypatch.setenv("LANG", "C")
    monkeypatch.setenv("PYTHONCOERCECLOCALE", "0")
    script = tmp_path / "policy.py"
    script.write_text(
        "import json, os, sys\n"
        "sys.stdin.readline()\n"
        "print(json.dumps({'name': 'env', 'env': dict(os.environ)}), flush=True)\n"
        "for line in sys.stdin:\n"
        "    if 'close' in line: break\n"
        "    print('{\"ok\": true}', flush=True)\n"
    )
    policy = StdioPolicy(f"{sys.executable} {script}", timeout=30)
    try:
        policy.reset("Pong", ["NOOP"])
        env = policy.identity["env"]
    finally:
        policy.close()
    assert env.pop(MARK, None) and env == dict(os.environ), sorted(set(env.items()) ^ set(os.environ.items()))


def test_a_policy_that_exits_at_once_is_reported_with_its_code():
    """Its exit may come before its parent is ready to see it (a race: twenty tries)."""
    from laya_eval.batch import PolicyError
    from laya_eval.stdio import StdioPolicy

    for _ in range(20):
        with pytest.raises(PolicyError, match=r"code 3\b"):
            StdioPolicy('sh -c "exit 3"', timeout=30).reset("Pong", ["NOOP"])


def test_a_policy_started_from_a_thread_that_blocks_signals_dies_of_its_own_signal():
    """A thread's blocked signals pass to what it starts: the policy's SIGTERM to itself did nothing
    (nor would SIGCHLD reach its parent), so its death went unseen and its code was wrong."""
    import threading

    from laya_eval.batch import PolicyError
    from laya_eval.stdio import StdioPolicy

    said: list = []

    def judge() -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGTERM})
        try:
            StdioPolicy("sh -c 'kill -TERM $$; sleep 10'", timeout=30).reset("Pong", ["NOOP"])
        except PolicyError as e:
            said.append(str(e))

    t = threading.Thread(target=judge)
    t.start()
    t.join(60)
    assert said and "code -15" in said[0], said


def test_a_judge_with_its_standard_streams_closed_gives_the_policy_none_of_its_own():
    """With descriptors 0 and 2 closed, the judge's socket to the reaper took number 2, which became
    the policy's stderr: a policy that wrote there filled a socket nobody reads, and stopped."""
    import subprocess

    noisy = ROOT / "tests/laya_eval/noisy_policy.py"
    judge = (
        "import sys; from laya_eval.stdio import StdioPolicy\n"
        f"p = StdioPolicy(sys.executable + ' {noisy}', timeout=10)\n"
        "for _ in range(8): p.reset('Pong', ['NOOP'])\n"
        "p.close(); print('played')\n"
    )

    def close_0_and_2() -> None:
        os.close(0)
        os.close(2)

    done = subprocess.run(
        [sys.executable, "-c", judge], env=ENV, stdout=subprocess.PIPE, preexec_fn=close_0_and_2, timeout=120
    )
    assert done.returncode == 0 and b"played" in done.stdout, done


def test_why_a_policy_cannot_start_is_said(tmp_path):
    from laya_eval.batch import PolicyError
    from laya_eval.stdio import StdioPolicy

    script = tmp_path / "policy.py"
    script.write_text("print('never')\n")  # not executable
    for command, why in ((str(tmp_path / "nope"), "No such file or directory"), (str(script), "Permission denied")):
        with pytest.raises(PolicyError, match=f"cannot start .*{why}"):
            StdioPolicy(command, timeout=30).reset("Pong", ["NOOP"])


def test_a_policy_plays_when_the_judge_holds_more_than_1024_descriptors(tmp_path):
    """select() refuses a descriptor past 1023; the judge's end and the reaper's come after all the
    judge holds open."""
    from laya_eval.stdio import StdioPolicy

    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.dup(0))
        policy = StdioPolicy(f"{sys.executable} {ROOT / 'packages/laya-eval/examples/stdio_policy.py'}", timeout=30)
        policy.reset("Pong", ["NOOP", "FIRE"])
        time.sleep(0.5)  # a reaper that failed has exited by now (a game would then fail on its next act)
        assert policy.proc is not None and policy.proc.poll() is None, "the policy's parent exited"
        policy.close()
    finally:
        for fd in held:
            os.close(fd)


def test_only_marked_processes_are_ended_once_the_policy_was_reaped(tmp_path):
    """A reaped policy's number may be another process's: with none given, only the mark counts."""
    import subprocess

    from laya_eval.processes import MARK, end_all, new_mark

    mark = new_mark()
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    marked = subprocess.Popen(sleep, env={**os.environ, MARK: mark})
    other = subprocess.Popen(sleep)
    try:
        end_all(None, mark)
        assert marked.wait(timeout=10) == -signal.SIGKILL
        assert other.poll() is None, "an unmarked process was ended"
    finally:
        for p in (marked, other):
            p.kill()
            p.wait()


def test_policy_specs():
    assert type(load_policy("constant:FIRE")).__name__ == "ConstantPolicy"
    assert callable(load_policy("tests.laya_eval.fake_policies:slow", {"seconds": 0}))
    with pytest.raises(EvalError, match="unknown policy 'nonsense'; registered: constant, .*noop, random"):
        load_policy("nonsense")
    with pytest.raises(EvalError, match="'constant' could not be created: EvalError"):
        load_policy("constant")
    with pytest.raises(EvalError, match="cannot import 'no_such_module'"):
        load_policy("no_such_module:thing")
    with pytest.raises(EvalError, match="has no attribute 'missing'"):
        load_policy("tests.laya_eval.fake_policies:missing")


def test_baseline_choice_normalisation_and_flags(tmp_path):
    assert normalise(5.4, REFERENCE["Pong"]) == pytest.approx(1.0)
    assert normalise(1.0, Baseline(3.0, 3.0, "x", 4500)) is None
    meta = {
        "game": "Pong",
        "baselines": {
            "expert": "builtin",
            "expert_score": 10.0,
            "random_score": -21.0,
            "expert_score_cap4500": 3.0,
            "random_score_cap4500": -20.0,
        },
        "protocol": {"decision_cap": 27000},
    }
    (tmp_path / "expert2f" / "Pong").mkdir(parents=True)
    (tmp_path / "expert2f" / "Pong" / "meta.json").write_text(json.dumps(meta))
    extra = read_meta_baselines(tmp_path)
    capped, full = choose_baseline("Pong", 4500, extra), choose_baseline("Pong", None, extra)
    assert (capped.expert, capped.cap) == (3.0, 4500) and (full.expert, full.cap) == (10.0, None)
    assert choose_baseline("Boxing", 4500, extra) is REFERENCE["Boxing"]
    assert flags_for("Boxing", 0.5, REFERENCE["Boxing"], None) == [
        "baselines measured with a cap of 4500, this run none"
    ]
    assert flags_for("Skiing", None, None, 4500) == ["the expert only presses NOOP", "no expert baseline"]
    assert flags_for("Solaris", 0.1, Baseline(1.0, 2.0, "x", 4500), 4500) == [
        "excluded: the expert scores below random",
        "the expert (1) is not above random (2)",
    ]
    assert flags_for("Pong", 1.7, REFERENCE["Pong"], 4500) == ["normalised score 1.70 outside [-0.5, 1.5]"]


def test_bad_baselines_and_results_are_one_line_errors(tmp_path, capsys):
    (tmp_path / "meta.json").write_text("{broken")
    rc = main(
        [
            "run",
            "--policy",
            "random",
            "--games",
            "Pong",
            "--baselines",
            str(tmp_path / "meta.json"),
            "--out",
            str(tmp_path / "r.json"),
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "is not a dataset meta.json" in err and err.count("\n") == 1
    (tmp_path / "bad.json").write_text("[]")
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert "is not a laya-eval results file" in capsys.readouterr().err
    assert main(["run", "--policy", "random", "--games", "Pongg", "--out", str(tmp_path / "x.json")]) == 2
    assert "did you mean Pong" in capsys.readouterr().err


def test_report_and_compare(tmp_path, capsys):
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    run(a, "random", games=("Pong", "Breakout"))
    run(b, "constant:FIRE", games=("Pong", "Breakout"))
    assert main(["report", str(a / "results.json"), str(b / "results.json"), "--out", str(tmp_path / "rep")]) == 0
    figures = {"normalised.png", "aggregates.png", "profile.png"}
    assert {p.name for p in (tmp_path / "rep").iterdir()} == {"report.md", *figures}
    for name in figures:
        assert (tmp_path / "rep" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / "rep" / "report.md").read_text()
    assert report.count("# Evaluation of") == 2 and f"({b / 'results.json'})" in report, "each section names its file"
    capsys.readouterr()
    assert main(["compare", str(a / "results.json"), str(b / "results.json")]) == 0
    out = capsys.readouterr().out
    assert "| Pong |" in out and "P(B > A) = " in out


@pytest.mark.slow
def test_sigkill_mid_run_then_rerun_completes(tmp_path):
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "laya_eval.cli",
        "run",
        "--policy",
        "tests.laya_eval.fake_policies:slow",
        "--policy-kwargs",
        '{"seconds": 0.01}',
        "--games",
        "Pong,Breakout,Freeway",
        "--episodes",
        "2",
        "--cap",
        "150",
        "--random-episodes",
        "1",
        "--out",
        str(out),
    ]
    p = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while time.time() < deadline and not (out.exists() and json.loads(out.read_text())["games"]):
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    partial = load_results(out)  # intact JSON with whole games only
    assert 1 <= len(partial["games"]) < 3
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    final = load_results(out)
    assert final["games"].keys() == {"Pong", "Breakout", "Freeway"}
    for game, g in partial["games"].items():  # kept, not played again: a replay scores alike but takes its own seconds
        assert final["games"][game] == g, game


@pytest.mark.slow
def test_ray_executor_gives_the_local_results(tmp_path, ray_local):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    local = run(tmp_path / "a", "random", games=("Pong", "Breakout"))
    remote = run(tmp_path / "b", "random", games=("Pong", "Breakout"), executor="ray")
    for game in ("Pong", "Breakout"):
        assert remote["games"][game]["scores"] == local["games"][game]["scores"]
        assert remote["games"][game]["random"] == {
            **local["games"][game]["random"],
            "seconds": remote["games"][game]["random"]["seconds"],
        }
    assert np.isclose(remote["summary"]["all"]["iqm"], local["summary"]["all"]["iqm"])
    # What the player says it is was recorded by the local judge only (push then refused Ray's results).
    (tmp_path / "c").mkdir()
    said = run(tmp_path / "c", unruly(tmp_path, "calm"), episodes=1, random_episodes=0, executor="ray")
    assert said["policy"].get("identity") == {"name": "calm"}, said["policy"]
