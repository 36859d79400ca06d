"""The quickstart at toy size: every stage runs for real, a rerun skips them, other settings are refused."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from laya_policy.cli import main
from laya_policy.quickstart import STAGES

from ..processes import as_from_a_terminal, ended

TOY = [
    "--games",
    "Pong",
    "--train-frames",
    "40",
    "--val-frames",
    "16",
    "--steps",
    "4",
    "--episodes",
    "1",
    "--image-size",
    "64",
    "--batch",
    "4",
    "--cap",
    "30",
    "--decision-cap",
    "60",
    "--baseline-episodes",
    "1",
    "--video-decisions",
    "10",
    "--workers",
    "1",
]


def test_quickstart_runs_every_stage_then_skips_them(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TOY]) == 0
    printed = capsys.readouterr().out
    assert all(f"{stage}: done in" in printed for stage in STAGES)
    report = (out / "report.md").read_text()
    for part in ("## Data", "## Training", "## Evaluation of", "Pong", "![training](training.png)", "majority label"):
        assert part in report
    assert "4 steps of 2 x 4 records" in report, "two training processes on a CPU, each with the batch"
    used = json.loads((out / "eval" / "results.json").read_text())["games"]["Pong"]["baseline"]["source"]
    assert f"| {used} |" in report, "the report names the baseline each game was normalised with"
    assert (out / "training.png").stat().st_size > 0 and (out / "eval" / "results.json").exists()
    assert json.loads((out / "stages" / "load.json").read_text())["rows"] == {"train": 40, "validation": 16}
    assert list(out.glob("*.gif")), "a video of the trained policy"
    meta = json.loads((out / "data" / "expert2f" / "Pong" / "meta.json").read_text())
    # the quickstart's epsilon: 0.3, and Pong's 0.5 (docs/learning-on-a-cpu.md)
    assert meta["origin"].endswith(", epsilon 0.5"), "the experts played the data with the quickstart's epsilon"
    assert "a uniform random one with probability 0.3 (Pong 0.5)" in report
    assert "training.png" in _links(out)  # Pong's baselines at --cap 30 are 0 and 0: no figures to link

    assert main(["quickstart", "--out", str(out), *TOY]) == 0
    assert capsys.readouterr().out.count("done before, skipped") == len(STAGES)
    # a stage recorded done whose output is gone runs again (all were skipped, to a report never written)
    (out / "report.md").unlink()
    assert main(["quickstart", "--out", str(out), *TOY]) == 0
    assert "report: done before, but report.md is gone; again" in capsys.readouterr().out
    assert (out / "report.md").is_file()
    # what the report reads of the training, edited or cut short: one line naming the file and the field
    # (KeyError and IndexError tracebacks, or a JSON error naming no file)
    summary, log = out / "train" / "summary.json", out / "train" / "log.jsonl"
    kept = {p: p.read_bytes() for p in (summary, log)}
    edits = [
        (summary, lambda b: b"{}", "steps"),
        (summary, lambda b: json.dumps({**json.loads(b), "curve": [[1]]}).encode(), "curve"),
        (summary, lambda b: json.dumps({**json.loads(b), "minutes": "slow"}).encode(), "minutes"),
        (summary, lambda b: b[: len(b) // 2], "not JSON"),
        (log, lambda b: b + b"garbage\n", "not JSON"),
        (log, lambda b: b'{"step": 1, "nll": 0.5}\n', "games"),
    ]
    for path, edit, said in edits:
        path.write_bytes(edit(kept[path]))
        (out / "stages" / "report.json").unlink(missing_ok=True)
        assert main(["quickstart", "--out", str(out), *TOY]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(path) in err[0] and said in err[0], (said, err)
        path.write_bytes(kept[path])
    assert main(["quickstart", "--out", str(out), *TOY]) == 0, "the files as they were: the report again"
    capsys.readouterr()

    # a folder made before out and restart left the compared settings is the same run, and a link to
    # the folder is refused (its lock, named after the link, would not be the folder's)
    settings = out / "settings.json"
    settings.write_text(json.dumps({**json.loads(settings.read_text()), "out": "elsewhere", "restart": False}))
    assert main(["quickstart", "--out", str(out), *TOY]) == 0
    assert capsys.readouterr().out.count("done before, skipped") == len(STAGES)
    (tmp_path / "link").symlink_to(out)
    assert main(["quickstart", "--out", str(tmp_path / "link"), *TOY]) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    # the same folder spelled otherwise (or moved) is the same run: it was refused as "other settings"
    assert main(["quickstart", "--out", f"{out}/", *TOY]) == 0
    assert capsys.readouterr().out.count("done before, skipped") == len(STAGES)

    assert main(["quickstart", "--out", str(out), *TOY[:-2], "--workers", "2"]) == 2
    assert "other settings" in (err := capsys.readouterr().err) and "--workers 1 there, 2 now" in err, err

    # --restart deletes a quickstart's folder, and nothing else: not a folder of other files, nor the
    # folder a user stands in (both were deleted whole)
    other = tmp_path / "thesis"
    (other / "ch1").mkdir(parents=True)
    (other / "ch1" / "draft.tex").write_text("mine")
    assert main(["quickstart", "--out", str(other), "--restart", *TOY]) == 2
    assert "no quickstart's settings.json" in capsys.readouterr().err
    assert (other / "ch1" / "draft.tex").read_text() == "mine"
    # nor does a run without --restart move in: it wrote its settings.json among a training run's
    # files, which the next --restart then deleted (an outside review, from the docs alone)
    assert main(["quickstart", "--out", str(other), *TOY]) == 2
    assert "no quickstart's settings.json" in capsys.readouterr().err
    assert sorted(p.name for p in other.iterdir()) == ["ch1"]
    here = os.getcwd()
    try:
        os.chdir(out)
        assert main(["quickstart", "--out", ".", "--restart", *TOY]) == 2
    finally:
        os.chdir(here)
    assert "holds the current folder" in capsys.readouterr().err
    assert (out / "report.md").is_file()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="links and signals as Linux has them")
def test_a_run_folder_in_use_is_refused_before_anything_is_deleted(tmp_path, capsys):
    """Nothing held the run folder: a second quickstart with --restart deleted a running one's folder,
    its training lock with it, and both trained into it."""
    out = tmp_path / "qs"
    first = subprocess.Popen(
        [sys.executable, "-m", "laya_policy.cli", "quickstart", "--out", str(out), *TOY, "--steps", "2000"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 120
        while not (out / "stages" / "generate.json").exists():
            assert first.poll() is None and time.monotonic() < deadline, first.stderr and first.stderr.read()
            time.sleep(0.1)
        assert main(["quickstart", "--out", str(out), "--restart", *TOY, "--steps", "2000"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"another process (pid {first.pid})" in err[0], err
        assert (out / "stages" / "generate.json").is_file(), "the running quickstart's folder was deleted"
    finally:
        first.send_signal(signal.SIGINT)
        ended(first, timeout=120)


@pytest.mark.parametrize("part", ["training.png", "stages", "eval"])
def test_a_link_planted_in_a_run_folder_is_refused(tmp_path, capsys, part):
    """A link in place of a part of the run folder had the stage that writes it write where it
    pointed (training.png went through the link; the stage records and results.json into its folder)."""
    out, outside = tmp_path / "qs", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    victim.write_text("mine")
    (out / part).symlink_to(victim if part.endswith(".png") else outside)
    assert main(["quickstart", "--out", str(out), *TOY]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(out / part) in err[0] and "link" in err[0], err
    assert sorted(p.name for p in outside.iterdir()) == ["victim"] and victim.read_text() == "mine"


def _links(out) -> list[str]:
    """The images report.md links, each checked to be there (it linked figures never drawn)."""
    import re

    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (out / "report.md").read_text())
    assert all((out / link).is_file() for link in links), links
    return links


def test_the_quickstart_runs_the_reference_cnn_through_the_same_stages(tmp_path, capsys):
    out = tmp_path / "qs-cnn"
    argv = [*TOY, "--model", "cnn", "--sample", "--epsilon", "0.1", "--baseline-episodes", "0"]
    assert main(["quickstart", "--out", str(out), *argv]) == 0
    printed = capsys.readouterr().out
    # --baseline-episodes 0 failed at the evaluate stage (the data held no baselines): laya-eval's
    # reference table it is, so Pong is scored and its figures are drawn and linked
    assert {"eval/normalised.png", "eval/profile.png"} <= set(_links(out))
    assert all(f"{stage}: done in" in printed for stage in STAGES)
    final = out / "train" / "final"
    assert (final / "cnn.safetensors").is_file() and not (final / "backbone").exists()
    assert json.loads((final / "vlm_agent_config.json").read_text())["backbone"] == "cnn"
    results = json.loads((out / "eval" / "results.json").read_text())
    played = results["games"]["Pong"]
    assert played["error"] is None and len(played["scores"]) == 1, "laya-eval played the CNN checkpoint"
    assert results["settings"]["greedy"] is False, "--sample: each move drawn from the policy's probabilities"
    meta = json.loads((out / "data" / "expert2f" / "Pong" / "meta.json").read_text())
    assert meta["origin"].endswith(", epsilon 0.1"), "--epsilon reaches the experts"


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--epsilon", "1.5"),
        ("--epsilon", "Pong=2"),
        ("--epsilon", "Freeway=0.5"),  # the toy plays Pong alone: no Freeway to give it
        ("--train-frames", "0"),
        ("--games", "Nope"),
        ("--games", "Seaquest"),  # no built-in expert: found after the games before it were written
        ("--steps", "0"),
        ("--batch", "0"),
        ("--image-size", "100"),
        ("--minutes", "0"),
        ("--episodes", "0"),
        ("--cap", "0"),
        ("--video-decisions", "0"),
        ("--video-decisions", "5000"),  # past a GIF's 4,500: refused by its video, after the training
        ("--val-frames", "0"),  # its load stage reads the validation split: a datasets traceback there
        ("--device", "mps"),  # known to torch, failed at the first tensor after the data stages
    ],
)
def test_a_bad_setting_is_refused_on_one_line_before_any_work(tmp_path, capsys, flag, value):
    """A bad --episodes was found by the evaluate stage, after the data and the training."""
    out = tmp_path / "qs"
    assert main(["quickstart", "--out", str(out), *TOY, flag, value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and value in lines[0], lines
    assert "--passes" not in lines[0], "the quickstart has no --passes to suggest"
    assert "with --expert" not in lines[0], "the quickstart has no --expert to suggest"
    assert not out.exists(), "nothing written"


def test_an_out_that_is_a_file_is_named_by_its_flag(tmp_path, capsys):
    out = tmp_path / "a-file"
    out.write_text("mine")
    assert main(["quickstart", "--out", str(out), *TOY]) == 2
    assert capsys.readouterr().err == f"error: --out {out}: is a file, expected a run folder\n"
    assert out.read_text() == "mine"


def test_what_a_quickstart_folder_holds_is_read_as_untrusted(tmp_path):
    """settings.json and the stage records are read back on every run: a FIFO held open(), a deep file
    was a RecursionError traceback, and stage records of 7 skipped every stage to a report that was
    never written (an outside hostile review)."""
    import os

    from ..promises import check_promises, returns_within

    cases = {
        "settings.json": lambda p: os.mkfifo(p),
        "settings.json ": lambda p: p.write_text("[" * 100_000 + "]" * 100_000),
        "stages/generate.json": lambda p: p.write_text("7"),
    }
    for name, plant in cases.items():
        out = tmp_path / f"q{len(name)}{name.endswith(' ')}"
        path = out / name.strip()
        path.parent.mkdir(parents=True)
        plant(path)
        argv = ["quickstart", "--out", out]
        done, got = returns_within(
            60, lambda a=argv, o=out: check_promises(main, a, sandbox=tmp_path, target=o), [path]
        )
        assert done, f"quickstart waited on {name}"
        code, err = got
        assert code == 2 and name.strip() in err, err


def test_the_quickstarts_epsilon_is_one_text_every_form_of_it_compares_by():
    """From an outside review: the default's Pong part was dropped for a quickstart without Pong only
    when the flag was left out by typing it the same way; a number from Python failed on .split; only
    a game's own gave the others generate's 0.1; and a run folder of the number 0.3 was refused as
    another setting than the text '0.3'."""
    from laya_policy.quickstart import _compared
    from laya_policy.settings import QuickstartConfig

    assert QuickstartConfig().epsilon == "0.3,Pong=0.5"
    assert QuickstartConfig(games=["Freeway"]).epsilon == "0.3"
    assert QuickstartConfig(epsilon=0.3, games=["Pong"]).epsilon == "0.3"
    assert QuickstartConfig(epsilon="Pong=0.6").epsilon == "0.3,Pong=0.6"
    assert _compared({"epsilon": 0.3, "seed": 0}) == _compared(
        {"epsilon": QuickstartConfig(epsilon=0.3).epsilon, "seed": 0}
    )
