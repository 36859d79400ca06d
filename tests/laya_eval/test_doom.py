"""laya-eval on ViZDoom basic: any policy and three baselines on the same seeded episodes."""

import json
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("vizdoom", reason="ViZDoom is an optional extra (laya-eval[vizdoom])")

from laya_eval.cli import main
from laya_eval.doom import evaluate_doom

EXAMPLE = Path(__file__).parents[2] / "packages" / "laya-eval" / "examples" / "stdio_policy.py"


def test_baselines_and_a_policy_on_the_same_seeds(tmp_path):
    victim = tmp_path / "victim"  # a link planted at the temporary name was written through
    victim.write_text("ORIGINAL\n")
    (tmp_path / ".d.json.tmp").symlink_to(victim)
    r = evaluate_doom("constant:ATTACK", episodes=6, out=str(tmp_path / "d.json"))
    assert victim.read_text() == "ORIGINAL\n"
    rows = r["results"]
    assert set(rows) == {"expert", "random", "always_attack", "policy"}
    assert rows["expert"]["kill_rate"] == 1.0 and rows["expert"]["mean"] > rows["random"]["mean"]
    assert rows["policy"]["rewards"] == rows["always_attack"]["rewards"], "same seeds, same episodes"
    assert rows["policy"]["actions"] == {"ATTACK": sum(rows["policy"]["actions"].values())}
    expected = (rows["policy"]["mean"] - rows["random"]["mean"]) / (rows["expert"]["mean"] - rows["random"]["mean"])
    assert r["normalised"] == pytest.approx(expected)
    written = json.loads((tmp_path / "d.json").read_text())
    assert written["scenario"] == "basic" and written["policy_kwargs"] == {}
    assert set(written["emulator"]) == {"vizdoom"} and written["laya_eval"] and written["date"], "what it was played on"


def test_a_subprocess_policy_plays_doom_through_the_cli(tmp_path, capsys):
    assert (
        main(
            [
                "doom",
                "--policy",
                f"cmd:{sys.executable} {EXAMPLE}",
                "--episodes",
                "2",
                "--out",
                str(tmp_path / "d.json"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "(judged)" in out and "expert (baseline)" in out and "Normalised" in out


def test_an_unknown_scenario_is_a_one_line_error(tmp_path, capsys):
    assert main(["doom", "--policy", "random", "--scenario", "nope", "--out", str(tmp_path / "d.json")]) == 2
    assert "unknown scenario 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,field",
    [
        (["--episodes", "0"], "--episodes"),  # wrote NaN means: not JSON
        (["--seed-base", "-1"], "--seed-base"),
        (["--policy-kwargs", "[1]"], "--policy-kwargs"),
        (["--timeout", "0"], "--timeout"),
        (["--out", ""], "--out"),  # wrote nothing, exit 0
    ],
)
def test_doom_flags_out_of_range_are_one_line(tmp_path, flags, field):
    from ..promises import check_promises

    out = tmp_path / "d.json"
    code, err = check_promises(main, ["doom", "--policy", "random", "--out", out, *flags], sandbox=tmp_path, target=out)
    assert code == 2 and field in err and not out.exists(), err


@pytest.mark.parametrize("mine", ["a laya-eval run results file", "a user's notes"])
def test_doom_never_replaces_a_file_it_did_not_write(tmp_path, mine):
    """Any file at --out was replaced by Doom results, an Atari run's results included."""
    from ..promises import check_promises

    out = tmp_path / "r.json"
    text = '{"settings": {}, "games": {}}\n' if mine.startswith("a laya") else "my notes\n"
    out.write_text(text)
    code, err = check_promises(
        main, ["doom", "--policy", "random", "--episodes", "1", "--out", out], sandbox=tmp_path, target=None
    )
    assert code == 2 and "--out" in err and "laya-eval doom" in err and out.read_text() == text, err
    ours = tmp_path / "d.json"
    assert main(["doom", "--policy", "random", "--episodes", "1", "--out", str(ours)]) == 0
    assert main(["doom", "--policy", "random", "--episodes", "1", "--out", str(ours)]) == 0, "its own: replaced"


def test_doom_records_what_the_policy_says_it_is(tmp_path, monkeypatch):
    """run stored a policy's identity with its results; doom dropped it (an outside review)."""
    monkeypatch.setenv("UNRULY_NAME", "told")
    script = Path(__file__).parent / "unruly_policy.py"
    out = tmp_path / "d.json"
    args = ["doom", "--policy", f"cmd:{sys.executable} {script} calm {tmp_path}", "--episodes", "1"]
    assert main([*args, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["identity"] == {"name": "told"}


def test_doom_out_under_a_file_is_one_line(tmp_path):
    from ..promises import check_promises

    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "d.json"
    code, err = check_promises(
        main, ["doom", "--policy", "random", "--episodes", "1", "--out", out], sandbox=tmp_path, target=out
    )
    assert code == 2 and "--out" in err, err


@pytest.mark.parametrize(
    "policy,message",
    [
        ("tests.laya_eval.fake_policies:nan_probs", "non-finite probabilities"),
        ("tests.laya_eval.fake_policies:wrong_batch", "returned shape"),
        ("tests.laya_eval.fake_policies:raising", "raised RuntimeError: model exploded"),
        ("tests.laya_eval.fake_policies:reset_raises", "reset raised"),
        ("tests.laya_eval.fake_policies:exits", "raised SystemExit: 0"),
    ],
)
def test_a_misbehaving_policy_fails_doom_on_one_line_and_the_baselines_are_kept(tmp_path, capsys, policy, message):
    """As `run` fails a game: one line, exit 1, the results file written with the baselines and the error
    (a traceback before, and sys.exit(0) in a policy ended the judge with 0 and no file)."""
    out = tmp_path / "d.json"
    code = main(["doom", "--policy", policy, "--episodes", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("failed: DoomBasic: ") and message in err, err
    written = json.loads(out.read_text())
    assert message in written["error"] and written["normalised"] is None
    assert set(written["results"]) == {"expert", "random", "always_attack"}


def test_a_hung_subprocess_is_killed_at_dooms_own_timeout(tmp_path, capsys):
    """From an outside review: `run` takes --timeout and `doom` had none, so a hung cmd: policy held
    the judge for the 60 s default whatever the user wanted."""
    out = tmp_path / "d.json"
    hanging = f"cmd:{sys.executable} {Path(__file__).parent / 'hanging_policy.py'}"
    t = time.monotonic()
    code = main(["doom", "--policy", hanging, "--episodes", "1", "--timeout", "1.5", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1 and "no answer to 'act' within 1.5s; killed" in err, err
    assert time.monotonic() - t < 30


def test_a_close_that_raises_is_a_warning_and_the_run_is_kept(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert (
        main(["doom", "--policy", "tests.laya_eval.fake_policies:close_raises", "--episodes", "1", "--out", str(out)])
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: the policy's close() raised RuntimeError: close failed" in err
    assert "policy" in json.loads(out.read_text())["results"]


def test_a_policy_that_changes_folder_does_not_move_the_results(tmp_path, capsys, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    kwargs = json.dumps({"folder": str(tmp_path / "elsewhere")})
    policy = "tests.laya_eval.fake_policies:moves_away"
    args = ["doom", "--policy", policy, "--policy-kwargs", kwargs, "--episodes", "1", "--out", "d.json"]
    assert main(args) == 0
    assert (tmp_path / "d.json").exists() and not (tmp_path / "elsewhere" / "d.json").exists()


def test_a_constant_button_doom_lacks_is_refused_before_play(tmp_path, capsys):
    out = tmp_path / "d.json"
    assert main(["doom", "--policy", "constant:FIRE", "--episodes", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--policy" in err and "FIRE is not a button of DoomBasic" in err and not out.exists(), err


def test_a_vizdoom_config_in_the_working_folder_changes_nothing(tmp_path, monkeypatch):
    """ViZDoom reads ./_vizdoom.ini and runs ./_vizdoom/autoexec.cfg as console commands, and writes
    both where it is started: a file someone left there changed the judge's baselines (turbo 255 moved
    the expert from +73 to +79). The game starts in a private folder of its own."""
    clean = tmp_path / "clean"
    hostile = tmp_path / "hostile"
    (hostile / "_vizdoom").mkdir(parents=True)
    (hostile / "_vizdoom" / "autoexec.cfg").write_text("turbo 255\n")
    (hostile / "_vizdoom.ini").write_text("[GlobalSettings]\n")
    clean.mkdir()
    rows = []
    for folder in (clean, hostile):
        monkeypatch.chdir(folder)
        played = evaluate_doom("random", episodes=3)["results"]
        played["policy"].pop("seconds")  # the one figure that is the machine's
        rows.append(played)
    assert rows[0] == rows[1]
    assert not any(p.name.startswith("_vizdoom") for p in clean.iterdir()), "nothing written where it was started"


def test_a_subprocess_policy_is_told_the_platform(tmp_path):
    """A policy in another process was told the game and its buttons, never the platform, so it
    could not ask the question it was trained on; each act now names it, on Doom and on ALE."""
    from laya_eval.runner import play
    from laya_eval.stdio import StdioPolicy
    from laya_protocol.protocol import Protocol

    policy = Path(__file__).parent / "telling_policy.py"
    for platform in ("vizdoom", "ale"):
        log = tmp_path / f"{platform}.jsonl"
        command = f"{sys.executable} {policy} {log}"
        if platform == "vizdoom":
            evaluate_doom(f"cmd:{command}", episodes=1)
        else:
            p = StdioPolicy(command, timeout=30)
            play(p, "Pong", Protocol.ale_v5("Pong", decision_cap=3), 1, 100_000)
            p.close()
        acts = [json.loads(line) for line in log.read_text().splitlines() if '"act"' in line]
        assert acts and {a["platform"] for a in acts} == {platform}, acts[:1]


def test_a_subprocess_policy_that_dies_fails_doom_as_it_fails_run(tmp_path, capsys):
    """The stdio bridge says what went wrong itself (PolicyError); Doom's loop wrapped that as
    'raised PolicyError: ...', where `run` passes it on as it is."""
    script = Path(__file__).parent / "unruly_policy.py"
    out = tmp_path / "d.json"
    code = main(
        ["doom", "--policy", f"cmd:{sys.executable} {script} crash {tmp_path}", "--episodes", "1", "--out", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 1 and "exited" in err and "raised PolicyError" not in err, err
