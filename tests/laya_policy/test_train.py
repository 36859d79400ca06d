import json
import os

import pytest

from atari_data.produce.generate import GenerateConfig, generate_game
from laya_eval.evaluate import RunConfig, evaluate
from laya_policy.checkpoint import load_checkpoint
from laya_policy.settings import TrainConfig
from laya_policy.train import CrashForTesting, lr_factor, train

from ..processes import alive, as_from_a_terminal, deaf_to_ctrl_c, ended, spawned
from ..promises import run_cli


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train-data")
    for game in ("Pong", "Breakout"):
        generate_game(
            GenerateConfig(
                root=str(root),
                train_frames=60,
                val_frames=16,
                min_train_episodes=1,
                decision_cap=80,
                baseline_episodes=0,
            ),
            game,
        )
    return root


def config(data, out, **kw):
    base = dict(data=str(data), out=str(out), image_size=64, batch=4, steps=12, evals=2, eval_records=8)
    base.update(kw)
    return TrainConfig(**base)


def test_a_crashed_run_resumes_from_its_last_state_and_finishes(data, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(CrashForTesting):
        train(config(data, out, crash_at_step=8), progress=False)
    state_log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in state_log] == [6], "the evaluation at step 6 was saved before the crash"
    summary = train(config(data, out, crash_at_step=8), progress=False)  # same command again
    assert summary["steps"] == 12
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [6, 12]
    assert set(log[-1]["games"]) == {"Breakout", "Pong"} and all(
        {"accuracy", "nll", "ece"} <= set(g) for g in log[-1]["games"].values()
    )
    assert sum(summary["samples_per_group"].values()) == 12 * 4
    assert "ece_before" in summary["calibration"]
    model, cfg = load_checkpoint(out / "final")
    assert cfg.image_size == 64 and cfg.frames == 2 and "choice" in cfg.temperatures
    assert (out / "best" / "vlm_agent_config.json").exists()
    nlls = [e["nll"] for e in log]  # kept by the default rule (its cases: test_the_best_checkpoint_is_the_first_...)
    assert summary["best"] == {"step": log[nlls.index(min(nlls))]["step"], "nll": min(nlls), "select_by": "nll"}


def test_a_resumed_run_ends_with_the_uninterrupted_runs_weights_whatever_optimiser_flags_it_saved(data, tmp_path):
    """The optimiser's state is resumed, its way of stepping is not: a state saved before the optimiser
    was fused (torch's defaults, fused and foreach None) resumes fused, and the weights at the end are
    the uninterrupted run's, to the bit (a step of the unfused optimiser rounds differently)."""
    import torch

    with pytest.raises(CrashForTesting):
        train(config(data, tmp_path / "a", crash_at_step=8), progress=False)
    state = torch.load(tmp_path / "a" / "state.pt", weights_only=True)
    for group in state["opt"]["param_groups"]:
        group.update(fused=None, foreach=None)
    torch.save(state, tmp_path / "a" / "state.pt")
    train(config(data, tmp_path / "a", crash_at_step=8), progress=False)
    train(config(data, tmp_path / "b"), progress=False)
    resumed, _ = load_checkpoint(tmp_path / "a" / "final")
    whole, _ = load_checkpoint(tmp_path / "b" / "final")
    for (name, p), q in zip(resumed.state_dict().items(), whole.state_dict().values(), strict=True):
        assert torch.equal(p, q), name


def test_evaluations_report_the_majority_labels_share_beside_accuracy(data, tmp_path, capsys):
    """A model that ignores the screen scores the majority label's share; each evaluation reports it
    beside the accuracy (counted here from the val files), so a run stuck at the prior shows it."""
    from collections import Counter

    train(config(data, tmp_path / "run", steps=2, evals=1, eval_records=64), progress=False)
    entry = json.loads((tmp_path / "run" / "log.jsonl").read_text().splitlines()[-1])
    for game, g in entry["games"].items():
        rows = (data / "expert2f" / game / "val.jsonl").read_text().splitlines()
        labels = Counter(json.loads(r)["label"] for r in rows)
        assert g["records"] == len(rows), "every val record was evaluated"
        assert g["majority"] == pytest.approx(max(labels.values()) / len(rows))
    printed = capsys.readouterr().out
    assert "majority" in printed and f"{entry['games']['Pong']['majority']:.3f}" in printed


def test_the_trained_checkpoint_plays_in_laya_eval(data, tmp_path):
    out = tmp_path / "run"
    train(config(data, out, steps=4, evals=1), progress=False)
    res = evaluate(
        RunConfig(
            policy=f"laya:{out / 'final'}",
            games=["Pong"],
            episodes=2,
            cap=10,
            random_episodes=0,
            out=str(tmp_path / "r.json"),
        ),
        progress=False,
    )
    assert res["games"]["Pong"]["error"] is None
    from laya_eval.cli import main as judge

    # The run's folder, as a user would first pass it: one line naming the checkpoint inside it.
    argv = ["run", "--policy", f"laya:{out}", "--games", "Pong", "--out", str(tmp_path / "r2.json")]
    code, _, err = run_cli(judge, argv)
    assert code == 2 and err.count("\n") == 1 and f"the run's checkpoint is {out / 'final'}" in err, err
    from laya_policy.cli import main

    code, _, err = run_cli(main, ["push", str(out), "--repo", "me/x", "--dry-run", str(tmp_path / "staged")])
    assert code == 2 and err.count("\n") == 1 and f"the run's checkpoint is {out / 'final'}" in err, err


def test_restart_starts_over(data, tmp_path):
    out = tmp_path / "run"
    train(config(data, out, steps=4, evals=1), progress=False)
    summary = train(config(data, out, steps=6, evals=1, restart=True), progress=False)
    assert summary["steps"] == 6


def test_the_learning_rate_warms_up_then_anneals_to_a_tenth():
    assert lr_factor(0.01) == pytest.approx(1 / 3)
    assert lr_factor(0.03) == pytest.approx(1.0)
    assert lr_factor(1.0) == pytest.approx(0.1) and lr_factor(1.5) == pytest.approx(0.1)
    assert lr_factor(0.2) > lr_factor(0.6) > lr_factor(0.9)


def test_calibration_fits_on_held_out_episodes_and_reports_on_records_it_did_not_see(data, tmp_path):
    from laya_policy.train import _halves, load_groups

    cfg = config(data, tmp_path / "a", steps=4, evals=1)
    val = [ex for exs in load_groups(cfg, "val").values() for ex in exs]
    fit, report = _halves(val)
    ids = lambda exs: {ex.rec["id"] for ex in exs}  # noqa: E731
    assert fit and report and not ids(fit) & ids(report)
    eps = lambda exs: {(ex.rec["game"], ex.rec["episode"]) for ex in exs}  # noqa: E731
    multi = {g for g in ("Breakout", "Pong") if len({e for gg, e in eps(val) if gg == g}) > 1}
    assert not {e for e in eps(fit) & eps(report) if e[0] in multi}, "whole episodes on one side"
    games = lambda exs: {ex.rec["game"] for ex in exs}  # noqa: E731
    assert games(fit) == games(report) == {"Breakout", "Pong"}, "every game on both sides"
    summary = train(cfg, progress=False)
    calib = summary["calibration"]
    assert calib["holdout"] == ["Breakout", "Pong"], "by default the training games' own held-out episodes"
    assert (calib["fit_records"], calib["report_records"]) == (len(fit), len(report))
    one = sorted(g for g in ("Breakout", "Pong") if g not in multi)
    assert calib["report_from"] == (
        f"alternate records of the one episode of {', '.join(f'{g}/expert2f' for g in one)}"
        if one
        else "other episodes"
    ), calib["report_from"]
    _, saved = load_checkpoint(tmp_path / "a" / "final")
    if "skipped" in calib:
        assert calib["ece_before"] < 0.05 and saved.temperatures["choice"] == 1.0
    else:
        assert saved.temperatures["choice"] == pytest.approx(calib["temperature"]) and "ece_after" in calib
    # Continuing from a checkpoint starts from its temperature (and keeps it when already calibrated).
    summary = train(
        config(data, tmp_path / "b", steps=2, evals=1, init_from=str(tmp_path / "a" / "final"), image_size=None),
        progress=False,
    )
    assert summary["calibration"]["start_temperature"] == pytest.approx(saved.temperatures["choice"])
    # best/ keeps the temperature it started from: a parent's of 2.5 (best/ was saved at T = 1)
    parent = tmp_path / "a" / "final" / "vlm_agent_config.json"
    parent.write_text(json.dumps({**json.loads(parent.read_text()), "temperatures": {"choice": 2.5}}))
    train(
        config(data, tmp_path / "c", steps=2, evals=1, init_from=str(tmp_path / "a" / "final"), image_size=None),
        progress=False,
    )
    _, best = load_checkpoint(tmp_path / "c" / "best")
    assert best.temperatures["choice"] == 2.5


def _examples(games=("Boxing", "Breakout"), episodes=1, each=1000):
    from laya_policy.data import Example

    return [
        Example({"game": g, "source": "expert2f", "episode": i * episodes // each, "id": f"{g}-{i}"}, None, (g, i))
        for g in games
        for i in range(each)
    ]


@pytest.mark.parametrize("episodes", [1, 4])
def test_the_calibration_halves_are_spread_over_every_game(episodes):
    """A half was cut at 512 records after a stride rounded down: of 1,000 val records a game, the
    fit half held 500 of Boxing and 12 of Breakout, so the temperature was Boxing's."""
    from laya_policy.train import _halves

    for games in (("Boxing", "Breakout"), ("Boxing", "Breakout", "Freeway", "Pong")):
        halves = _halves(_examples(games, episodes))  # each game's episodes one after another, as a split holds them
        for half in halves:
            counts = [sum(ex.rec["game"] == g for ex in half) for g in games]
            assert len(half) == 512 and max(counts) - min(counts) <= 1 + 512 // 20, counts
        fit, report = ({(ex.rec["game"], ex.rec["episode"]) for ex in half} for half in halves)
        # whole episodes on one side where a game has several (an outside review: episodes numbered
        # i % 4 made alternate records the same halves as alternate episodes)
        assert not fit & report if episodes > 1 else fit == report, (fit, report)


def test_an_evaluation_spreads_its_records_over_the_whole_split():
    from laya_policy.train import evenly

    picked = evenly(list(range(511)), 256)
    assert len(picked) == 256 and picked[0] == 0 and picked[-1] == 510, picked[-3:]
    assert evenly(list(range(100)), 256) == list(range(100))


def test_calibrating_on_a_game_the_data_lacks_is_refused_before_training(data, tmp_path, capsys):
    from laya_policy.cli import main

    for games in ("Freeway", "Pongg"):
        argv = ["train", "--data", str(data), "--out", str(tmp_path / games), "--steps", "2", "--image-size", "64"]
        assert main([*argv, "--calibrate-on", games]) == 2
        err = capsys.readouterr().err
        assert "--calibrate-on" in err and games in err and err.count("\n") == 1, err
        assert not (tmp_path / games / "state.pt").exists(), "refused before the first step"


def test_a_held_out_set_too_small_to_halve_skips_calibration_and_says_why(tmp_path):
    root = tmp_path / "d"
    generate_game(
        GenerateConfig(
            root=str(root), train_frames=40, val_frames=1, min_train_episodes=1, decision_cap=40, baseline_episodes=0
        ),
        "Pong",
    )
    summary = train(config(root, tmp_path / "run", steps=2, evals=1), progress=False)
    assert "1 held-out record: no game has two" in summary["calibration"]["skipped"], summary["calibration"]
    assert (tmp_path / "run" / "final").is_dir()


def test_the_temperature_fit_follows_soft_targets():
    import torch

    from laya_policy.objectives import fit_temperature

    logits = torch.tensor([[2.0, 0.0, -2.0]] * 64)
    labels = torch.zeros(64, dtype=torch.long)
    soft = torch.softmax(logits / 4.0, -1)  # the expert was 4x less sure than the logits say
    assert fit_temperature(logits, labels, soft) == pytest.approx(4.0, rel=1e-3)
    assert fit_temperature(logits, labels) < 0.5, "against hard labels that are always right it sharpens instead"


def test_train_cli_runs_and_reports_bad_input_on_one_line(data, tmp_path, capsys):
    from laya_policy.cli import main

    assert (
        main(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "r"),
                "--steps",
                "3",
                "--batch",
                "2",
                "--image-size",
                "64",
                "--evals",
                "1",
            ]
        )
        == 0
    )
    assert "3 steps" in capsys.readouterr().out
    assert main(["train", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "missing" in err and "Traceback" not in err
    for flag, value in (
        ("--steps", "0"),
        ("--image-size", "0"),
        ("--image-size", "100"),
        ("--threads", "0"),
        ("--processes", "0"),
    ):
        assert main(["train", "--data", str(data), "--out", str(tmp_path / "y"), flag, value]) == 2
        assert f"{flag} {value}: expected" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_processes_under_torchrun_is_refused_on_one_line(data, tmp_path, capsys, monkeypatch):
    from laya_policy.cli import main

    monkeypatch.setenv("WORLD_SIZE", "2")  # what torchrun sets in each process it starts
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r"), "--processes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--processes 2: torchrun started this process" in err, err
    assert not (tmp_path / "r").exists()


def test_a_packed_repository_trains_like_its_layout(data, tmp_path):
    from atari_data.publish.pack import PackConfig, pack
    from atari_data.publish.repo import data_kind
    from laya_policy.data import load_examples

    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    assert data_kind(str(packed)) == "packed" and data_kind(str(data)) == "layout" and data_kind("laya/atari") == "hub"
    from_layout = load_examples(str(data), "val", games=["Pong"])
    from_packed = load_examples(str(packed), "val", games=["Pong"])
    assert [e.rec["id"] for e in from_packed] == [e.rec["id"] for e in from_layout]
    for a, b in zip(from_layout, from_packed, strict=True):
        assert a.rec["question"] == b.rec["question"] and a.rec.get("target") == b.rec.get("target")
        assert all((x == y).all() for x, y in zip(a.frames(2), b.frames(2), strict=True))
    summary = train(config(packed, tmp_path / "run", steps=4, evals=1), progress=False)
    assert summary["steps"] == 4 and set(summary["samples_per_group"]) == {"Breakout", "Pong"}
    assert len(load_examples(str(packed), "val")) == len(from_packed) + len(
        load_examples(str(data), "val", games=["Breakout"])
    )
    # The loader reads the files as they are now: a shard cut to 3 rows, its time kept (`cp -p`), is
    # seen, and refused, as its rows are no longer the card's.
    import os

    import pyarrow.parquet as pq

    from atari_data.errors import AtariDataError

    shard = next((packed / "data" / "expert2f" / "Pong").glob("validation-*.parquet"))
    stat = shard.stat()
    pq.write_table(pq.read_table(shard).slice(0, 3), shard)
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    # Only Pong's config is checked (Breakout's files are not read): its count is the cut shard's.
    with pytest.raises(AtariDataError, match=r"config 'expert2f-Pong'.*its 'validation' files hold 3 rows where"):
        load_examples(str(packed), "val", games=["Pong"])


def test_select_by_play_keeps_the_checkpoint_with_the_best_play_check(data, tmp_path):
    """On the reference CNN: selecting is the same for every model, and its 2,400 decisions of play
    checks (three 400-decision episodes an evaluation) cost less than the tiny VLM's."""
    out = tmp_path / "run"
    train(config(data, out, model="cnn", steps=4, evals=2, select_by="play", games=["Pong"]), progress=False)
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    scores = [e["play"]["score"] for e in log]
    assert len(scores) == 2 and all(s is not None for s in scores)
    best = json.loads((out / "summary.json").read_text())["best"]
    assert best["select_by"] == "play" and best["play"] == max(scores)
    assert best["step"] == log[scores.index(max(scores))]["step"]
    nlls = [e["nll"] for e in log]  # the rule's own cases: test_the_best_checkpoint_is_the_first_of_the_best_...
    assert best["step"] != log[nlls.index(min(nlls))]["step"], "this run no longer tells play from the NLL"


@pytest.mark.parametrize(
    "select_by,values,kept",
    [
        ("play", [0.2, 0.5, 0.3], 1),  # neither the first nor the last
        ("play", [0.5, 0.2, 0.5], 0),  # of equals, the first
        ("play", [None, -0.1, None], 1),  # an evaluation without a score is never kept
        ("play", [None, None], None),
        ("nll", [0.9, 0.4, 0.6], 1),  # the lowest
        ("nll", [0.4, 0.9, 0.4], 0),
    ],
)
def test_the_best_checkpoint_is_the_first_of_the_best_evaluations(select_by, values, kept):
    """The rule record() keeps best/ by, over evaluations in order (an outside review: the run below
    has equal play scores, so it could not tell the rule from keeping the first)."""
    from laya_policy.train import improves

    best = None
    for step, value in enumerate(values):
        entry = {"step": step, "nll": value, "play": {"score": value}}
        if improves(entry, best, select_by):
            best = {"step": step, "nll": value, "play": value}
    assert (best or {}).get("step") == kept


UNGUARDED = """
import sys
from laya_policy.settings import TrainConfig
from laya_policy.train import train

config = dict(model="cnn", steps=1, batch=2, image_size=64, evals=1, processes=2)
train(TrainConfig(data=sys.argv[1], out=sys.argv[2], **config))
"""


def test_a_script_without_a_main_guard_is_told_it_needs_one(data, tmp_path):
    """From a researcher's review: train(processes=2) called at a script's top level ran again in each
    process it started (spawn imports the script), where it said another process was writing --out:
    a traceback a process, and nothing about the guard it needed."""
    import subprocess
    import sys

    script = tmp_path / "unguarded.py"
    script.write_text(UNGUARDED)
    env = {**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(data), str(tmp_path / "run")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    # each started process says what is wrong, once (the script's own call then fails as a call does)
    assert done.returncode != 0 and "another process" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.count('if __name__ == "__main__":') == 2, done.stderr[-3000:]


def test_two_processes_train_data_parallel_with_gloo(data, tmp_path):
    import subprocess
    import sys

    out = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        "2",
        "--standalone",  # a free port of its own: a fixed one can be taken by anything else on the machine
        "-m",
        "laya_policy.cli",
        "train",
        "--data",
        str(data),
        "--out",
        str(out),
        "--steps",
        "4",
        "--batch",
        "2",
        "--image-size",
        "64",
        "--evals",
        "1",
    ]
    done = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=600,
        # torchrun's agent keeps a log folder of its own in the temporary folder, and leaves it
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr[-12000:]  # the ranks' own lines too: a rare SIGABRT here kept none
    summary = json.loads((out / "summary.json").read_text())
    assert summary["replicas"] == {"world": 2, "weights_agree": True}
    assert sum(summary["samples_per_group"].values()) == 4 * 2, "rank 0 counts its own draws"
    assert (out / "final" / "vlm_agent_config.json").exists()

    # --processes 2 starts the same group itself: the same weights, to the byte
    ours = tmp_path / "processes"
    argv = [*cmd[cmd.index("train") :], "--processes", "2"]
    argv[argv.index(str(out))] = str(ours)
    done = subprocess.run([sys.executable, "-m", "laya_policy.cli", *argv], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((ours / "summary.json").read_text())["replicas"] == {"world": 2, "weights_agree": True}
    assert "Warning" not in done.stderr, done.stderr  # the replicas' check warned of a float taken under grad
    assert json.loads((ours / "final" / "training.json").read_text())["processes"] == 2
    for f in (out / "final").glob("*.safetensors"):
        assert (ours / "final" / f.name).read_bytes() == f.read_bytes(), f.name


def test_a_process_started_by_processes_reports_bad_input_on_one_line(data, tmp_path):
    import subprocess
    import sys

    argv = ["train", "--data", data, "--out", tmp_path / "r", "--processes", "2", "--games", "Freeway"]
    argv += [*PROCESS_MODEL, "--steps", "2", "--batch", "2", "--image-size", "64"]
    done = subprocess.run(
        [sys.executable, "-m", "laya_policy.cli", *map(str, argv)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no training records" in lines[0], done.stderr


def test_the_processes_end_with_the_one_that_started_them(data, tmp_path):
    """Killed, the starter frees the lock on OUT; a process of its group left training would write
    OUT beside the next run. Started as `nohup ... &` or a script's background job starts it, with
    SIGINT ignored, which torch's own end-with-the-parent signal (SIGINT) then does not reach."""
    import signal
    import time

    starter = _start_training(data, tmp_path, preexec_fn=deaf_to_ctrl_c)
    children = _started_group(starter, tmp_path / "r")
    starter.send_signal(signal.SIGKILL)
    starter.wait()
    deadline = time.monotonic() + 30
    while any(alive(p) for p in children) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in children if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left, "a training process outlived its starter"


IN_PROCESS_CTRL_C = """
import os, signal, sys, threading, time
from pathlib import Path

from laya_policy.cli import main

out = Path(sys.argv[1], "r")


def interrupt_once_training():
    while not out.exists():
        time.sleep(0.05)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=interrupt_once_training, daemon=True).start()
argv = ["train", "--data", sys.argv[2], "--out", str(out), "--steps", "100000", "--batch", "2", "--image-size", "64"]
code = main([*argv, "--evals", "1", "--model", "cnn"])
print(code, signal.getsignal(signal.SIGINT) is signal.default_int_handler)
"""


def test_ctrl_c_in_process_gives_ctrl_c_back(data, tmp_path):
    """``main`` called from Python (a notebook, a script) and stopped by Ctrl-C returns 130 and leaves
    Ctrl-C working: it ignored SIGINT from then on, for the caller's whole session. (In a process of
    its own: a SIGINT sent into the test run's worker can end the worker.)"""
    import subprocess
    import sys

    caller = subprocess.Popen(
        [sys.executable, "-c", IN_PROCESS_CTRL_C, str(tmp_path), data],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    out, err = ended(caller, timeout=120)
    assert out.split()[-2:] == ["130", "True"], out + err


def test_ctrl_c_ends_the_processes_with_one_line(data, tmp_path):
    """Ctrl-C reaches the starter and its processes, and `uv run` passes it on once more: the second
    one came while the interpreter's exit waited for the processes, and printed a traceback."""
    import signal
    import time

    starter = _start_training(data, tmp_path, start_new_session=True)  # its own group, as a terminal's job
    children = _started_group(starter, tmp_path / "r")
    time.sleep(1)
    os.killpg(starter.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(starter.pid, signal.SIGINT)
    err, left = _outcome(starter, children)
    assert starter.returncode == 130 and err.strip() == "interrupted: run the same command again to resume", err
    assert not left, "a training process outlived Ctrl-C"
    assert _left_in(tmp_path / "tmp") == [], "the starter left files in its temporary folder"


def test_ctrl_c_while_the_processes_start_is_one_line(data, tmp_path):
    """From an outside review: a Ctrl-C in the first seconds, while the processes still import torch,
    printed each one's KeyboardInterrupt traceback (58-67 lines) before the starter's line."""
    import signal
    import time

    starter = _start_training(data, tmp_path, start_new_session=True)
    deadline = time.monotonic() + 120
    while len(children := spawned(starter.pid)) < 2 and time.monotonic() < deadline and starter.poll() is None:
        time.sleep(0.02)
    assert len(children) == 2, f"the group did not start: {starter.poll()}"
    time.sleep(0.2)  # into their imports: the processes make OUT seconds later
    assert not (tmp_path / "r").exists(), "too late: the processes had started training"
    os.killpg(starter.pid, signal.SIGINT)
    err, left = _outcome(starter, children)
    assert starter.returncode == 130 and err.strip() == "interrupted: run the same command again to resume", err
    assert not left, "a training process outlived Ctrl-C"
    assert _left_in(tmp_path / "tmp") == [], "the starter left files in its temporary folder"


def test_processes_of_a_starter_deaf_to_ctrl_c_are_deaf_to_it_too(data, tmp_path):
    """A job started in the background from a script (`cmd &`) ignores SIGINT, and so does one process;
    from an outside review: the processes of `--processes 2` put Python's handler back and a SIGINT
    to the group ended the run (exit 1)."""
    import signal
    import time

    starter = _start_training(data, tmp_path, start_new_session=True, preexec_fn=deaf_to_ctrl_c)
    children = _started_group(starter, tmp_path / "r")
    os.killpg(starter.pid, signal.SIGINT)
    time.sleep(2)
    assert starter.poll() is None and all(alive(p) for p in children), "the group ended on an ignored SIGINT"
    os.kill(starter.pid, signal.SIGTERM)
    err, left = _outcome(starter, children)
    assert starter.returncode == 128 + signal.SIGTERM and not left, err


def test_sigterm_to_the_starter_ends_its_processes_and_leaves_no_lock(data, tmp_path):
    """From an outside review: SIGTERM (or SIGHUP) to the starter ended it where it stood, leaving its
    empty ``laya-launch-*`` folder and the run's lock file (its processes did end, by their death signal)."""
    import signal

    starter = _start_training(data, tmp_path)
    children = _started_group(starter, tmp_path / "r")
    os.kill(starter.pid, signal.SIGTERM)
    err, left = _outcome(starter, children)
    assert starter.returncode == 128 + signal.SIGTERM, err
    assert err.strip() == "terminated (SIGTERM): run the same command again to resume", err
    assert not left, "a training process outlived its starter"
    assert _left_in(tmp_path / "tmp") == [], "the starter left files in its temporary folder"
    assert not (tmp_path / ".r.lock").exists(), "the run's lock file was left"


@pytest.mark.parametrize("sig", ["SIGKILL", "SIGINT", "SIGTERM"])
def test_a_process_killed_ends_its_group_on_one_line(data, tmp_path, sig):
    """A training process killed from outside (the OOM killer, a user's kill) ends the others and the
    starter says which one and how, on one line and exit 1, leaving nothing in the temporary folder:
    torch's launcher printed its traceback and left its error files behind."""
    import signal
    import time

    starter = _start_training(data, tmp_path)
    children = _started_group(starter, tmp_path / "r")
    time.sleep(1)
    os.kill(max(children), getattr(signal, sig))  # the later started: rank 1
    err, left = _outcome(starter, children)
    assert starter.returncode == 1, err
    assert err.strip().splitlines() == [f"error: training process 1 of 2 was ended ({sig}); the others have ended"]
    assert not left, "a training process outlived the one killed"
    assert _left_in(tmp_path / "tmp") == [], "the starter left files in its temporary folder"


def test_a_group_split_unevenly_over_the_processes_resumes_and_each_needs_a_record(tmp_path, capsys):
    """From an outside review: 7 records over 2 processes are 4 and 3, and the plan kept rank 0's
    share, so rank 1 refused to resume its own command; a group with fewer records than processes
    left a process nothing to draw from (a traceback)."""
    import subprocess
    import sys

    root = tmp_path / "odd"
    for game, n in (("Pong", 7), ("Breakout", 1)):
        cfg = GenerateConfig(
            root=str(root), train_frames=n, val_frames=4, min_train_episodes=1, decision_cap=80, baseline_episodes=0
        )
        generate_game(cfg, game)

    def train_argv(*extra) -> list[str]:
        # --passes sets the steps from the records: every process must count all of them, or with 4
        # and 3 records they planned 4 and 3 steps and the first waited for ever in its last all-reduce
        argv = ["train", "--data", root, "--out", tmp_path / "r", "--passes", "2", "--evals", "2"]
        return [*map(str, argv), *PROCESS_MODEL, "--batch", "2", "--image-size", "64", *extra]

    def train_cli(*extra):
        cmd = [sys.executable, "-m", "laya_policy.cli", *train_argv(*extra)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600)

    assert train_cli("--games", "Pong", "--processes", "2", "--crash-at-step", "3").returncode == 1
    assert (tmp_path / "r" / "state.pt").exists()
    from laya_policy.cli import main

    # one process: in this one (a subprocess would import torch again for it)
    assert main(train_argv("--games", "Pong", "--processes", "1")) == 2
    err = capsys.readouterr().err
    assert "was started with world 2, this command gives 1" in err, err
    done = train_cli("--games", "Pong", "--processes", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == 4  # ceil(2 * 7 / (2 * 2))
    done = train_cli("--processes", "2", "--restart")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-2000:]
    assert "Breakout has 1 training record" in lines[0], lines[0]


# What the tests of processes (signals, groups, starters) train: the reference CNN. The process
# machinery is the same for every model, and a CNN process starts without transformers' Idefics3
# (5-6 s of a two-core machine's time a process, two or three processes a test).
PROCESS_MODEL = ["--model", "cnn"]


def _start_training(data, tmp_path, **popen):
    """``train --processes 2`` for as long as a test needs it, in a subprocess whose temporary folder
    is ``tmp_path/tmp`` (a starter killed with SIGKILL leaves its empty folder there, not in /tmp)."""
    import subprocess
    import sys

    argv = ["train", "--data", data, "--out", tmp_path / "r", "--processes", "2", "--steps", "100000"]
    argv += [*PROCESS_MODEL, "--batch", "2", "--image-size", "64", "--evals", "1"]
    (tmp_path / "tmp").mkdir()
    popen.setdefault("preexec_fn", as_from_a_terminal)  # the tests that start it deaf say so
    return subprocess.Popen(
        [sys.executable, "-m", "laya_policy.cli", *map(str, argv)],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path / "tmp")},
        **popen,
    )


def _outcome(starter, children) -> tuple[str, list[int]]:
    """The starter's stderr once it has ended, and which of its processes outlived it (killed here)."""
    import signal

    _, err = ended(starter)
    left = [p for p in children if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    return err, left


def _left_in(tmp) -> list[str]:
    """What is in ``tmp`` but torch's own compile cache (``torchinductor_USER``), which it keeps."""
    return [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]


def _started_group(starter, out) -> set[int]:
    """The two training processes ``starter`` started, once they have met: rank 0 makes OUT then
    (before that, a process still reading its arguments from the starter ends with it anyway)."""
    import time

    deadline = time.monotonic() + 120
    while not out.exists() and time.monotonic() < deadline and starter.poll() is None:
        time.sleep(0.2)
    children = spawned(starter.pid)
    assert len(children) == 2, f"the group did not start: {starter.poll()}"
    return children


def _average_in_group(out: str) -> None:
    import torch

    from laya_policy.distributed import Distributed

    rank = int(os.environ["RANK"])  # launch sets it, as torchrun does
    params = [torch.nn.Parameter(torch.zeros(s)) for s in [(3, 4), (5,), (2, 2, 2), (7,)]]
    for i, p in enumerate(params[:3]):  # the last has no gradient, on both ranks
        p.grad = torch.arange(p.numel(), dtype=torch.float32).reshape(p.shape) * (rank + 1) + i
    params[0].grad = params[0].grad.t().contiguous().t()  # a gradient whose strides are not its shape's
    Distributed("cpu").average_gradients(params)
    torch.save([None if p.grad is None else p.grad.clone() for p in params], f"{out}/{rank}.pt")
    if rank == 0:
        holders = {os.getpid(): "rank 0", os.getppid(): "the starter"}
        holder = _listening_on(int(os.environ["MASTER_PORT"]), holders)
        open(f"{out}/rendezvous", "w").write(holder)


def _listening_on(port: int, pids: dict[int, str]) -> str:
    """Which of ``pids`` has a socket listening on ``port`` (from /proc: the socket's inode, then the
    process whose file descriptors hold it)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port and f[3] == "0A":  # 0A: LISTEN
                inodes.add(f"socket:[{f[9]}]")
    for pid, name in pids.items():
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return name
            except OSError:
                continue
    return "none of them"


def test_gradients_are_averaged_over_the_processes_each_in_its_place(tmp_path):
    """And the rendezvous port is the starter's from before the processes start: it was chosen by
    binding and closing a socket, and another program could take it in the seconds before rank 0
    bound it (from an outside review: a 28-line EADDRINUSE traceback)."""
    import torch

    from laya_policy.distributed import launch

    launch(_average_in_group, (str(tmp_path),), 2)
    for rank in (0, 1):
        grads = torch.load(tmp_path / f"{rank}.pt", weights_only=True)
        for i, (g, shape) in enumerate(zip(grads[:3], [(3, 4), (5,), (2, 2, 2)], strict=True)):
            n = torch.tensor(shape).prod().item()
            want = torch.arange(n, dtype=torch.float32).reshape(shape) * 1.5 + i  # (1x + 2x) / 2 + i
            assert torch.equal(g, want), (rank, i)
        assert grads[3] is None
    assert (tmp_path / "rendezvous").read_text() == "the starter"


def _crash_on_rank_0() -> None:
    import time

    import torch

    torch.distributed.init_process_group("gloo")
    if os.environ["RANK"] == "0":
        time.sleep(0.5)
        raise RuntimeError("a bug on rank 0")
    torch.distributed.all_reduce(torch.zeros(1))  # waits for rank 0, and fails when it is gone


def test_a_crash_in_one_process_is_told_by_its_own_traceback_alone(tmp_path, capfd):
    """Rank 1 fails too, in its all-reduce, once rank 0 is gone: the cause is rank 0's traceback,
    and the starter prints that one, not a traceback per process."""
    from laya_policy.distributed import launch
    from laya_policy.errors import GroupFailed

    with pytest.raises(GroupFailed, match="training process 0 of 2 failed"):
        launch(_crash_on_rank_0, (), 2)
    err = capfd.readouterr().err
    assert err.count("Traceback") == 1 and "RuntimeError: a bug on rank 0" in err, err


def _leave_the_group(how: str) -> None:
    """Join the group, all-reduce once, then finish, fail on one line, be stopped (Ctrl-C) or exit."""
    import atexit
    import sys

    import torch

    atexit.register(lambda: print("the interpreter's teardown ran", file=sys.stderr))
    torch.distributed.init_process_group("gloo")
    torch.distributed.all_reduce(torch.ones(1000))
    if how == "line":
        raise ValueError("a bad record, on one line")
    if how == "stopped":
        raise KeyboardInterrupt
    if how == "exited":
        sys.exit(0)


def test_no_process_aborts_in_gloos_teardown(capfd):
    """A process that left Python with its gloo group still up sometimes aborted in C++ teardown
    ("terminate called without an active exception", then SIGABRT), printed on the starter's
    terminal after its one line (laya-policy README); this test's first form (six rounds, the abort
    its only check) failed 3 times in at most 12 runs. The teardown's first step, atexit, shows whether a
    process went through it at all, every time; a SystemExit took that way too."""
    from laya_policy.distributed import launch
    from laya_policy.errors import GroupFailed

    told = []
    for how in ("stopped", "line", "done", "exited"):
        try:
            launch(_leave_the_group, (how,), 2)
            told.append("done")
        except (ValueError, GroupFailed) as e:
            told.append(str(e))
    err = capfd.readouterr().err
    assert "terminate called" not in err and "teardown ran" not in err, err
    stopped = "training process 0 of 2 was ended (SIGINT); the others have ended"
    assert told[:3] == [stopped, "a bad record, on one line", "done"], told
    # its work ended early with exit 0: a failure, not a finished run whose summary is missing
    assert told[3].startswith("the training processes ended without saying why"), told


def test_dagger_round_from_a_checkpoint_then_training_on_both_sources(data, tmp_path, capsys):
    from laya_policy.cli import main

    out = tmp_path / "run"
    train(config(data, out, steps=2, evals=1, games=["Pong"]), progress=False)
    root = tmp_path / "layout"
    import shutil

    shutil.copytree(data, root)
    assert (
        main(
            [
                "dagger",
                "--model",
                str(out / "final"),
                "--root",
                str(root),
                "--games",
                "Pong",
                "--round",
                "1",
                "--train-frames",
                "20",
                "--val-frames",
                "8",
                "--decision-cap",
                "40",
            ]
        )
        == 0
    )
    assert "Pong: 20 train" in capsys.readouterr().out
    meta = json.loads((root / "dagger1" / "Pong" / "meta.json").read_text())
    assert meta["source"] == "dagger1" and meta["frames"] == 2
    summary = train(
        config(
            root,
            tmp_path / "d1",
            steps=4,
            evals=1,
            games=["Pong"],
            sources=["expert2f", "dagger1"],
            balance="game_source",
            init_from=str(out / "final"),
        ),
        progress=False,
    )
    assert set(summary["samples_per_group"]) == {"Pong/expert2f", "Pong/dagger1"}

    # games checked before any is played: Pong was played and written before Seaquest was refused, and
    # no game at all was a silent success
    args = ["dagger", "--model", str(out / "final"), "--root", str(root), "--round", "2", "--train-frames", "20"]
    for games, said in (("Pong,Seaquest", "no built-in expert for Seaquest"), ("", "no game given")):
        assert main([*args, "--games", games]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--games" in err[0] and said in err[0], err
        assert not (root / "dagger2").exists()

    # a round written into the checkpoint's folder changes what push uploads (an outside review)
    held = sorted(p.relative_to(out) for p in out.rglob("*"))
    for inside in (out / "final", out / "final" / "data"):
        args = ["dagger", "--model", str(out / "final"), "--root", str(inside), "--games", "Pong", "--round", "3"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --root: ") and "inside the checkpoint" in err and err.count("\n") == 1, err
        assert sorted(p.relative_to(out) for p in out.rglob("*")) == held


def test_resume_truncates_the_log_to_the_state_it_resumes_from(data, tmp_path):
    out = tmp_path / "run"
    with pytest.raises(CrashForTesting):
        train(config(data, out, crash_at_step=8), progress=False)
    # A kill after an evaluation's line was appended but before state.pt was saved leaves a line
    # the state does not know; the resumed run must not keep it (nor write its own twice).
    with open(out / "log.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"step": 7, "minutes": 0.0, "games": {}, "nll": 1.0}) + "\n")
    train(config(data, out, crash_at_step=8), progress=False)
    assert [json.loads(x)["step"] for x in (out / "log.jsonl").read_text().splitlines()] == [6, 12]


@pytest.mark.parametrize("form", ["torch.save", "bare pickle"])
def test_a_planted_pickle_in_state_pt_is_refused_not_run(data, tmp_path, capsys, form):
    import pickle

    import torch

    from laya_policy.cli import main

    out, witness = tmp_path / "run", tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(witness), "w"))

    out.mkdir()
    with open(out / "state.pt", "wb") as f:
        (torch.save if form == "torch.save" else pickle.dump)({"model": Payload()}, f)
    code = main(
        [
            "train",
            "--data",
            str(data),
            "--out",
            str(out),
            "--steps",
            "2",
            "--batch",
            "2",
            "--image-size",
            "64",
            "--evals",
            "1",
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and not witness.exists()
    assert err.startswith("error: ") and "state.pt" in err and len(err.strip().splitlines()) == 1
    assert err.count(str(out / "state.pt")) == 1 and "AtariDataError" not in err, err  # said once, as a user reads it
    # torch's own message starts with how to load it anyway (weights_only=False); cut to one line,
    # that advice lost its warning. The line says what was refused and why instead.
    assert "weights_only" not in err and ("could run code" in err or form == "bare pickle"), err


def test_init_from_follows_the_checkpoint_and_refuses_a_different_setting(data, tmp_path, capsys):
    from laya_policy.cli import main

    first = tmp_path / "first"
    train(config(data, first, steps=2, evals=1, frames=1), progress=False)
    summary = train(
        TrainConfig(
            data=str(data),
            out=str(tmp_path / "next"),
            init_from=str(first / "final"),
            batch=2,
            steps=2,
            evals=1,
            eval_records=4,
        ),
        progress=False,
    )
    assert summary["steps"] == 2
    _, cfg = load_checkpoint(tmp_path / "next" / "final")
    assert (cfg.image_size, cfg.frames, cfg.preprocess) == (64, 1, "gpu"), "followed the checkpoint"
    capsys.readouterr()
    for flag, value in (
        ("--image-size", "128"),
        ("--frames", "2"),
        ("--preprocess", "processor"),
        ("--model", "random-smolvlm"),
    ):
        code = main(
            [
                "train",
                "--data",
                str(data),
                "--out",
                str(tmp_path / "bad"),
                "--init-from",
                str(first / "final"),
                flag,
                value,
                "--steps",
                "1",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and f"{flag} {value} differs" in err, err
        assert not (tmp_path / "bad").exists()
    for value in ("motion", "frames"):  # a VLM checkpoint has no cnn input form to follow or to differ from
        argv = ["train", "--data", str(data), "--out", str(tmp_path / "bad"), "--init-from", str(first / "final")]
        assert main([*argv, "--cnn-inputs", value, "--steps", "1"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--cnn-inputs {value}: only the cnn takes it" in err, err
        assert not (tmp_path / "bad").exists()


def test_a_checkpoint_loads_from_the_hub_cache_by_its_id_offline(data, tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    from laya_eval.cli import main as judge

    from ..atari_data.test_import_jat import hub_cache

    out = tmp_path / "run"
    train(config(data, out, steps=2, evals=1, games=["Pong"]), progress=False)
    files = {str(p.relative_to(out / "final")): p.read_bytes() for p in (out / "final").rglob("*") if p.is_file()}
    hub_cache(tmp_path / "hub", "laya/tiny-pong", files, repo_type="model")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    model, cfg = load_checkpoint("laya/tiny-pong")
    assert cfg.image_size == 64
    results = tmp_path / "r.json"
    assert (
        judge(
            [
                "run",
                "--policy",
                "laya:laya/tiny-pong",
                "--games",
                "Pong",
                "--episodes",
                "1",
                "--cap",
                "5",
                "--random-episodes",
                "0",
                "--out",
                str(results),
            ]
        )
        == 0
    )
    assert json.loads(results.read_text())["games"]["Pong"]["error"] is None
    with pytest.raises(OSError, match=r"hf download laya/other --revision v2 --local-dir DIR"):
        load_checkpoint("laya/other@v2")


def test_push_stages_a_model_card_then_uploads_to_a_hub_the_judge_plays_back_from(data, tmp_path, capsys):
    from laya_eval.cli import main as judge
    from laya_policy.cli import main

    out = tmp_path / "run"
    train(config(data, out, steps=2, evals=1, games=["Pong"]), progress=False)
    results = tmp_path / "eval.json"
    assert (
        judge(
            [
                "run",
                "--policy",
                f"laya:{out / 'final'}",
                "--games",
                "Pong",
                "--episodes",
                "1",
                "--cap",
                "5",
                "--random-episodes",
                "0",
                "--out",
                str(results),
            ]
        )
        == 0
    )
    staged = tmp_path / "staged"
    capsys.readouterr()
    assert (
        main(
            [
                "push",
                str(out / "final"),
                "--repo",
                "me/laya-tiny-pong",
                "--results",
                str(results),
                "--dry-run",
                str(staged),
            ]
        )
        == 0
    )
    assert "nothing uploaded" in capsys.readouterr().out
    card = (staged / "README.md").read_text()
    assert card.startswith('---\nlibrary_name: "laya-policy"\nlicense: "apache-2.0"')
    assert "base_model" not in card, "the tiny preset has no base model on the Hub"
    assert str(data) not in card and str(tmp_path) not in card, "a local path means nothing to others, and leaks"
    assert "laya-eval run --policy laya:me/laya-tiny-pong" in card and "| Pong |" in card and "2 steps" in card
    # A dry run never replaces a folder, and the card's table must be this checkpoint's.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "thesis.tex").write_text("keep")
    assert main(["push", str(out / "final"), "--repo", "me/laya-tiny-pong", "--dry-run", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "thesis.tex").read_text() == "keep" and "exists" in capsys.readouterr().err
    other = tmp_path / "random.json"
    assert (
        judge(
            [
                "run",
                "--policy",
                "random",
                "--games",
                "Pong",
                "--episodes",
                "1",
                "--cap",
                "5",
                "--random-episodes",
                "0",
                "--out",
                str(other),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert (
        main(
            [
                "push",
                str(out / "final"),
                "--repo",
                "me/laya-tiny-pong",
                "--results",
                str(other),
                "--dry-run",
                str(tmp_path / "s2"),
            ]
        )
        == 2
    )
    assert "records no checkpoint fingerprint" in capsys.readouterr().err and not (tmp_path / "s2").exists()
    assert main(["push", str(out / "final"), "--repo", "bad repo", "--dry-run", str(tmp_path / "s3")]) == 2
    assert "expected a Hub model id" in capsys.readouterr().err
    # Offline the upload itself is one line naming the repo.
    assert main(["push", str(out / "final"), "--repo", "me/laya-tiny-pong"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot push to the Hub repo me/laya-tiny-pong") and err.count("\n") == 1, err
    _push_for_real_and_play_back(out / "final", staged, results, tmp_path)


def _push_for_real_and_play_back(ckpt, staged, results, tmp_path):
    """The real upload: `laya-policy push` with the locked huggingface_hub against a server speaking
    the Hub's protocol, then `laya-eval run --policy laya:ORG/NAME` in a fresh cache downloads and
    plays exactly those bytes (the dry run's, which are the checkpoint's with no local path in its
    JSON). A second push of the same checkpoint uploads no file again."""
    import subprocess
    import sys

    from ..hub_server import HubServer

    with HubServer(tmp_path / "hub") as hub:
        env = hub.client_env(tmp_path / "hf-pusher")

        def start(*args: str, home: str = "hf-pusher") -> subprocess.Popen:
            return subprocess.Popen(
                [sys.executable, "-m", *args],
                env={**env, "HF_HOME": str(tmp_path / home)},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )

        def wait(proc: subprocess.Popen) -> str:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err[-3000:]
            return out

        def run(*args: str, home: str = "hf-pusher") -> str:
            return wait(start(*args, home=home))

        pushed = run("laya_policy.cli", "push", str(ckpt), "--repo", "me/laya-tiny-pong", "--results", str(results))
        assert f"{hub.url}/me/laya-tiny-pong/commit/" in pushed, pushed
        assert hub.unknown == [], hub.unknown
        key = "models/me/laya-tiny-pong"
        head = hub.store.repos[key]["branches"]["main"]
        stored = hub.store.files(key, head)
        local = {str(p.relative_to(staged)): p.read_bytes() for p in staged.rglob("*") if p.is_file()}
        assert sorted(local) == sorted(
            [*(str(p.relative_to(ckpt)) for p in ckpt.rglob("*") if p.is_file()), "README.md"]
        )
        assert sorted(stored) == sorted(local), "the checkpoint's files, plus its card"
        for path, data_ in local.items():
            assert hub.store.blob(stored[path][0]).read_bytes() == data_, path
        assert any(lfs for _, _, lfs in stored.values()), "weights go through git-lfs, as on the Hub"

        puts = hub.lfs_puts  # the same checkpoint pushed again while someone else plays it back
        again = start("laya_policy.cli", "push", str(ckpt), "--repo", "me/laya-tiny-pong", "--results", str(results))
        player = start(
            "laya_eval.cli",
            *("run", "--policy", "laya:me/laya-tiny-pong", "--games", "Pong", "--episodes", "1"),
            *("--cap", "5", "--random-episodes", "0", "--out", str(tmp_path / "played.json")),
            home="hf-player",
        )
        wait(again)
        assert hub.lfs_puts == puts, "the second push sends no weights again"
        wait(player)
        assert json.loads((tmp_path / "played.json").read_text())["games"]["Pong"]["error"] is None
        fetched = list((tmp_path / "hf-player" / "hub").glob("models--me--laya-tiny-pong/snapshots/*"))
        assert len(fetched) == 1, fetched
        got = sorted(str(p.relative_to(fetched[0])) for p in fetched[0].rglob("*") if not p.is_dir())
        assert got == sorted(p for p in local if p != "README.md"), "a player fetches the checkpoint, not the card"
        for path in got:
            assert (fetched[0] / path).read_bytes() == local[path], path


def test_a_run_cut_short_by_the_clock_keeps_the_step_schedule(data, tmp_path):
    """The learning rate of a step depends on the step alone: a run stopped by --max-minutes is where an
    uninterrupted run would be at that step, not annealed to the floor because its time ran out."""
    import torch

    out = tmp_path / "cut"
    summary = train(config(data, out, steps=5000, evals=1, max_minutes=0.03), progress=False)
    assert summary["planned_steps"] == 5000 and 1 <= summary["steps"] < 5000, summary["steps"]
    state = torch.load(out / "state.pt", weights_only=True)
    k = state["step"]
    base = json.loads((out / "final" / "training.json").read_text())["lrs"]["head"]
    assert state["opt"]["param_groups"][0]["lr"] == pytest.approx(base * lr_factor((k - 1) / 5000))


def test_the_same_config_gives_the_same_weights_and_one_thread_by_default(data, tmp_path):
    import torch
    from safetensors.torch import load_file

    torch.set_num_threads(2)
    first = train(config(data, tmp_path / "a", steps=6, evals=1), progress=False)
    assert first["threads"] == 1 and torch.get_num_threads() == 1, "one intra-op thread per CPU process"
    second = train(config(data, tmp_path / "b", steps=6, evals=1, threads=2), progress=False)
    assert second["threads"] == 2
    a = load_file(tmp_path / "a" / "final" / "head.safetensors")
    third = train(config(data, tmp_path / "c", steps=6, evals=1), progress=False)
    c = load_file(tmp_path / "c" / "final" / "head.safetensors")
    assert a.keys() == c.keys() and all(torch.equal(a[k], c[k]) for k in a), "same seed and threads: the same bytes"
    from laya_policy.train import build, resolve

    start = build(resolve(config(data, tmp_path / "start", steps=6, evals=1))).model.state_dict()
    assert any(not torch.equal(start[k], a[k]) for k in a), "the same bytes because training moved them"
    assert third["screen_cache"]["hits"] > 0 and third["screen_cache"]["mb"] > 0
    assert third["screen_cache"]["reserved_mb"] >= third["screen_cache"]["mb"], "blocks hold what is kept"


def test_weight_decay_spares_norms_biases_and_embeddings(data, tmp_path):
    from laya_policy.train import build, resolve

    s = build(resolve(config(data, tmp_path / "wd")))
    names = {id(p): n for n, p in s.model.named_parameters()}
    decayed = [names[id(p)] for g in s.opt.param_groups if g["weight_decay"] > 0 for p in g["params"]]
    spared = [names[id(p)] for g in s.opt.param_groups if g["weight_decay"] == 0 for p in g["params"]]
    assert decayed and spared
    assert not [n for n in decayed if "norm" in n or n.endswith("bias") or "embed" in n or "position" in n]
    assert any("norm" in n for n in spared) and any(n.endswith("bias") for n in spared)
    assert any("embed_tokens" in n for n in spared) and "image_position" in spared
    held = {id(p) for g in s.opt.param_groups for p in g["params"]}
    assert held == {id(p) for p in s.model.parameters() if p.requires_grad}, "every trained parameter, once"


def test_the_reference_cnn_trains_saves_and_plays_in_laya_eval(data, tmp_path):
    import torch

    from laya_policy.cnn import NatureCNN

    out = tmp_path / "cnn"
    summary = train(config(data, out, model="cnn", image_size=None, steps=6, evals=1), progress=False)
    assert summary["steps"] == 6 and "ece_before" in summary["calibration"]
    assert (out / "final" / "cnn.safetensors").is_file() and not (out / "final" / "backbone").exists()
    model, cfg = load_checkpoint(out / "final")
    assert isinstance(model, NatureCNN) and cfg.backbone == "cnn" and cfg.image_size == 84
    # options are read by name: any order the question shows them in gives the same scores
    q = {"criteria": {"NOOP": "", "FIRE": "", "RIGHT": ""}}
    shuffled = {"criteria": {"RIGHT": "", "NOOP": "", "FIRE": ""}}
    feats = torch.randn(1, 2, 84, 84)
    with torch.no_grad():
        a, b = model(feats, model.encode([q], 2))[0], model(feats, model.encode([shuffled], 2))[0]
    assert torch.equal(a[[2, 0, 1]], b)
    run = RunConfig(
        policy=f"laya:{out / 'final'}",
        games=["Pong"],
        episodes=1,
        cap=8,
        random_episodes=0,
        out=str(tmp_path / "r.json"),
    )
    assert evaluate(run, progress=False)["games"]["Pong"]["error"] is None
    # the newest frame and its motion go in; a checkpoint from before the motion channel keeps its form
    assert cfg.cnn_inputs == "motion" and model.inputs == "motion"
    from laya_policy.push import model_card

    assert "the newest screen and its motion" in model_card(out / "final", "me/cnn"), "the card names the form"
    still = torch.randn(1, 1, 84, 84).expand(1, 2, 84, 84)
    assert torch.equal(model.channels(still)[:, 1], torch.zeros(1, 84, 84)), "no motion between equal frames"
    config_file = out / "final" / "vlm_agent_config.json"
    written = json.loads(config_file.read_text())
    del written["cnn_inputs"]
    config_file.write_text(json.dumps(written))
    older, _ = load_checkpoint(out / "final")
    assert older.inputs == "frames" and torch.equal(older.channels(feats), feats)
    config_file.write_text(json.dumps({**written, "cnn_inputs": "edges"}))
    with pytest.raises(ValueError, match="cnn_inputs 'edges': expected one of motion, frames"):
        load_checkpoint(out / "final")


def test_a_resume_with_other_steps_batches_or_data_is_refused_on_one_line(data, tmp_path, capsys):
    from laya_policy.cli import main

    out = tmp_path / "run"
    with pytest.raises(CrashForTesting):
        train(config(data, out, crash_at_step=8), progress=False)
    argv = ["train", "--data", str(data), "--out", str(out), "--image-size", "64", "--evals", "2"]
    for changed in (["--steps", "12", "--batch", "8"], ["--steps", "20", "--batch", "4"]):
        capsys.readouterr()
        assert main([*argv, *changed]) == 2
        err = capsys.readouterr().err
        assert "state.pt: was started with" in err and "--restart" in err and len(err.strip().splitlines()) == 1, err
    assert main([*argv, "--steps", "12", "--batch", "4", "--threads", "2"]) == 0, "threads may change"


def test_the_cnn_refuses_settings_it_has_no_use_for(data, tmp_path, capsys):
    from laya_policy.cli import main

    for flags in (["--freeze", "vision"], ["--lr-backbone", "1e-4"], ["--image-size", "300"]):
        assert main(["train", "--data", str(data), "--out", str(tmp_path / "x"), "--model", "cnn", *flags]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and flags[0] in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "x"), "--cnn-inputs", "frames"]) == 2
    assert "only the cnn takes it" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_a_mistyped_model_lists_the_presets_at_once(data, tmp_path, capsys):
    """`--model tinyy` is neither a preset, a folder nor a Hub id ORG/NAME: online it spent 30 s on
    Hub retries, and it never said what the presets are."""
    from laya_policy.cli import main

    assert main(["train", "--data", str(data), "--out", str(tmp_path / "x"), "--model", "tinyy"]) == 2
    err = capsys.readouterr().err
    assert "--model tinyy" in err and "tiny, random-smolvlm, cnn" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()


def test_the_cnn_trains_in_the_older_frames_form_on_request_and_a_resume_keeps_its_form(data, tmp_path, capsys):
    """--cnn-inputs frames reproduces the form before the motion input (for comparisons); the checkpoint
    says so, and a run started in one form is not resumed in the other."""
    from laya_policy.cli import main

    out = tmp_path / "frames"
    with pytest.raises(CrashForTesting):
        train(config(data, out, model="cnn", image_size=None, cnn_inputs="frames", crash_at_step=8), progress=False)
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--steps", "12", "--evals", "2"]
    assert main([*argv, "--batch", "4"]) == 2, "a frames run resumed as a motion run"
    assert "was started with cnn_inputs 'frames'" in capsys.readouterr().err
    assert main([*argv, "--batch", "4", "--cnn-inputs", "frames"]) == 0
    model, cfg = load_checkpoint(out / "final")
    assert cfg.cnn_inputs == "frames" and model.inputs == "frames"
    from laya_policy.push import model_card

    card = model_card(out / "final", "me/cnn")
    assert "each screen as its own channel" in card and "motion" not in card


def test_training_through_smolvlms_own_processor_reads_the_same_screens_uncached(data, tmp_path):
    """--preprocess processor (SmolVLM's PIL processor, the reference path) trains too; its screens
    are not cached, and what the tower is given equals the processor's output."""
    import numpy as np
    import torch

    from laya_policy.imageprep import ImagePrep
    from laya_policy.train import build, resolve

    s = build(resolve(config(data, tmp_path / "p", preprocess="processor")))
    batch = draw_batch(s)
    expected = ImagePrep(64, "processor")(np.stack([f for ex in batch for f in ex.frames(2)]))
    assert torch.equal(s.screens(batch), expected) and s.screens.used == 0
    summary = train(config(data, tmp_path / "run", preprocess="processor", steps=2, evals=1), progress=False)
    assert summary["steps"] == 2 and summary["screen_cache"]["mb"] == 0


def test_kept_screens_fill_a_few_large_blocks_within_the_budget(data, tmp_path, monkeypatch):
    """Each kept screen was its own small allocation, made on the prefetch thread between the
    resize's large temporaries; glibc then held on to the freed temporaries' memory, and the
    quickstart's training grew past 24 GB of RSS on its 2 GB cache budget (7.7 GB after 400 steps,
    against 1.4 GB uncached). Kept screens now fill a few preallocated blocks, never more than
    the budget, and what comes back is still exactly what resizing again gives."""
    import numpy as np
    import torch

    from laya_policy import inputs
    from laya_policy.inputs import ScreenCache
    from laya_policy.train import build, resolve

    s = build(resolve(config(data, tmp_path / "c")))
    prep = s.screens.prep
    screen = 3 * 64 * 64  # bytes of one resized screen at 64 px

    def fill(budget_screens: int) -> ScreenCache:
        cache = ScreenCache(prep, 2, budget_mb=budget_screens * screen / 2**20)
        for step in [*range(6), *range(6)]:  # the second pass hits what the first kept
            batch = draw_batch(s, step)
            raw = np.stack([f for ex in batch for f in ex.frames(2)])
            assert torch.equal(cache(batch), prep.normalise(prep.resize(raw)))
        assert cache.hits > 0 and cache.reserved <= budget_screens * screen
        return cache

    def blocks(cache: ScreenCache) -> int:
        return len({t.untyped_storage().data_ptr() for t in cache._kept.values()})

    roomy = fill(10_000)
    assert 0 < len(roomy._kept) < 10_000 and roomy.used == len(roomy._kept) * screen
    assert blocks(roomy) == 1, f"{len(roomy._kept)} kept screens in {blocks(roomy)} allocations"
    monkeypatch.setattr(inputs, "BLOCK_BYTES", 3 * screen)  # blocks of 3 screens: 3, 3, then the 1 left
    tight = fill(7)
    assert len(tight._kept) == 7 and tight.used == tight.reserved == 7 * screen and blocks(tight) == 3


def test_screens_are_resized_a_bounded_share_of_a_batch_at_a_time(data, tmp_path, monkeypatch):
    """From a hostile review: a batch's screens were decoded, stacked and converted to float all at
    once, so frames of 4000x4000 (which a hostile meta.json may declare) took train to 10 GB for a
    batch of 16. At most RESIZE_BYTES of decoded frames are held and resized at a time (a larger
    frame alone), and what comes back is still exactly what resizing the batch at once gives."""
    import numpy as np
    import torch

    from laya_policy import inputs
    from laya_policy.inputs import ScreenCache
    from laya_policy.train import build, resolve

    s = build(resolve(config(data, tmp_path / "c")))
    prep = s.screens.prep
    batch = draw_batch(s, 0)
    raw = np.stack([f for ex in batch for f in ex.frames(2)])
    frame = raw[0].nbytes
    monkeypatch.setattr(inputs, "RESIZE_BYTES", 3 * frame)
    seen = []
    real = prep.resize
    monkeypatch.setattr(prep, "resize", lambda frames: seen.append(frames.nbytes) or real(frames))
    for budget in (0.0, 64.0):  # nothing kept, and screens kept
        cache = ScreenCache(prep, 2, budget_mb=budget)
        cache.budget = int(budget * 2**20)  # the processor's path keeps none; this prep's does
        assert torch.equal(cache(batch), prep.normalise(real(raw)))
    assert len(seen) > 2 and max(seen) <= 3 * frame, seen


def draw_batch(s, step: int = 0):
    from laya_policy.inputs import draw

    return draw(s.train, s.cfg.batch, s.cfg.seed, step=step)


def test_no_records_because_a_game_is_not_ready_says_which(data, tmp_path, capsys):
    """From an outside review: train beside a generate --force of its only game said 'no training
    records for sources all and games ['Pong']', where the game was there, between its swap and its
    _READY: the game it ignored is named."""
    import shutil

    from laya_policy.cli import main

    root = tmp_path / "data"
    shutil.copytree(data, root)
    (root / "expert2f" / "Pong" / "_READY").unlink()
    argv = ["train", "--data", str(root), "--out", str(tmp_path / "r"), "--games", "Pong", "--steps", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no training records" in err and "expert2f/Pong is not ready" in err and err.count("\n") == 1, err


# -- a run folder and its resume, tried by an outside hostile review -------------------------------------


@pytest.fixture(scope="module")
def cut_cnn_run(data, tmp_path_factory):
    """A cnn run cut off after step 4 of 8: what each test below resumes (a copy of it)."""
    out = tmp_path_factory.mktemp("cut") / "run"
    with pytest.raises(CrashForTesting):
        train(config(data, out, model="cnn", image_size=None, steps=8, crash_at_step=5), progress=False)
    return out


def _copy_run(run, tmp_path):
    import shutil

    return shutil.copytree(run, tmp_path / "run")


@pytest.mark.parametrize(
    "changed,key",
    [
        (["--select-by", "play"], "select_by"),  # a KeyError traceback at the first evaluation
        (["--lr-head", "0.1"], "lrs"),  # trained at the first rate, recorded at the second
        (["--init-from", "FINAL"], "init_from"),  # silently ignored
    ],
)
def test_a_resume_with_another_selection_rate_or_start_is_refused_on_one_line(
    data, cut_cnn_run, tmp_path, capsys, changed, key
):
    from laya_policy.cli import main

    out = _copy_run(cut_cnn_run, tmp_path)
    if "FINAL" in changed:
        other = tmp_path / "other"
        train(config(data, other, model="cnn", image_size=None, steps=2, evals=1), progress=False)
        changed = [str(other / "final") if c == "FINAL" else c for c in changed]
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--batch", "4", "--steps", "8"]
    capsys.readouterr()
    assert main([*argv, "--evals", "2", *changed]) == 2
    err = capsys.readouterr().err
    assert f"state.pt: was started with {key} " in err and len(err.strip().splitlines()) == 1, err
    assert not (out / ".play-check").exists()


def test_a_resume_with_another_freeze_names_it(data, tmp_path, capsys):
    """It was refused as an optimiser whose parameter lists differ, printed identically."""
    from laya_policy.cli import main

    out = tmp_path / "run"
    with pytest.raises(CrashForTesting):
        train(config(data, out, steps=4, crash_at_step=3), progress=False)
    argv = ["train", "--data", str(data), "--out", str(out), "--image-size", "64", "--batch", "4", "--steps", "4"]
    assert main([*argv, "--evals", "2", "--freeze", "vision"]) == 2
    err = capsys.readouterr().err
    assert "state.pt: was started with freeze 'none', this command gives 'vision'" in err, err


@pytest.mark.parametrize("where", ["a weight", "a key of its own"])
def test_a_state_declaring_more_numbers_than_it_holds_is_refused_by_its_shape(
    data, cut_cnn_run, tmp_path, capsys, where
):
    """A 20 MB state.pt whose first weight was a view of one number declaring 200 million (3 billion
    took the resume to 21 GB) was made dense by the NaN check before any shape was compared; a key
    the model does not have was made dense too (an outside read: 3.5 GB)."""
    import torch

    from laya_policy.cli import main

    out = _copy_run(cut_cnn_run, tmp_path)
    state = torch.load(out / "state.pt", weights_only=True)
    name = next(iter(state["model"])) if where == "a weight" else "zzz.extra"
    state["model"][name] = torch.zeros(1).expand(50_000_000)
    torch.save(state, out / "state.pt")
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--batch", "4", "--steps", "8"]
    assert main([*argv, "--evals", "2"]) == 2
    err = capsys.readouterr().err
    said = "is not a tensor of this model's" if where == "a weight" else "is not one of this model's weights"
    assert f"model.{name} {said}" in err, err


@pytest.mark.parametrize("spent", [1e300, 10**12])
def test_a_state_that_spent_ages_is_refused(data, cut_cnn_run, tmp_path, capsys, spent):
    """It resumed, stopped at once for the budget, and reported 4 steps in a 300-digit count of minutes."""
    import torch

    from laya_policy.cli import main

    out = _copy_run(cut_cnn_run, tmp_path)
    state = torch.load(out / "state.pt", weights_only=True)
    state["spent"] = float(spent)
    torch.save(state, out / "state.pt")
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--batch", "4", "--steps", "8"]
    assert main([*argv, "--evals", "2"]) == 2
    assert "is not a number of seconds" in capsys.readouterr().err


def test_a_run_stopped_between_the_two_renames_of_its_best_gets_it_back(data, cut_cnn_run, tmp_path):
    """A stop between swap_into_place's renames left .best.old and no best/, and a resume kept it so:
    the run finished with exit 0 and no best checkpoint."""
    out = _copy_run(cut_cnn_run, tmp_path)
    train(config(data, out, model="cnn", image_size=None, steps=8), progress=False)  # finished: no save to come
    (out / "best").rename(out / ".best.old")
    train(config(data, out, model="cnn", image_size=None, steps=8), progress=False)
    assert (out / "best" / "cnn.safetensors").is_file() and not (out / ".best.old").exists()


@pytest.mark.parametrize("what", ["a user's file", "a folder"])
def test_a_state_pt_no_run_wrote_is_never_replaced_even_on_restart(data, tmp_path, capsys, what):
    """--restart replaced a user's file named state.pt; a folder of that name failed at the first save."""
    from laya_policy.cli import main

    out = tmp_path / "run"
    out.mkdir()
    if what == "a folder":
        (out / "state.pt").mkdir()
    else:
        (out / "state.pt").write_text("my precious\n")
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--batch", "4", "--steps", "2"]
    assert main([*argv, "--evals", "1", "--restart"]) == 2
    err = capsys.readouterr().err
    assert "state.pt: is not a training state" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in out.iterdir()) == ["state.pt"]
    assert what == "a folder" or (out / "state.pt").read_text() == "my precious\n"


def test_an_empty_out_is_refused_not_taken_for_the_current_folder(data, tmp_path, capsys, monkeypatch):
    """An unset shell variable: the run wrote state.pt, best/ and final/ beside the user's files and
    said its checkpoint was /final."""
    from laya_policy.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    assert main(["train", "--data", str(data), "--out", "", "--model", "cnn", "--steps", "2", "--evals", "1"]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "empty" in err and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_vlm_checkpoint_whose_backbone_holds_integer_weights_is_refused_at_load(data, tmp_path):
    """The head's and the CNN's dtypes were checked, the backbone's not: int32 of the same bytes were
    cast to float32 and played (an outside read)."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    run = tmp_path / "vlm"
    train(config(data, run, steps=2, evals=1), progress=False)
    ckpt = shutil.copytree(run / "final", tmp_path / "bad")
    file = ckpt / "backbone" / "model.safetensors"
    weights = load_file(file)
    name = next(k for k, t in weights.items() if t.dtype == torch.float32)
    weights[name] = weights[name].view(torch.int32)
    save_file(weights, file, metadata={"format": "pt"})
    with pytest.raises(ValueError, match=rf"model\.safetensors: {name}: is I32"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("edit", ["nan", "int32"])
def test_a_checkpoint_of_nan_or_integer_weights_is_refused_at_load(data, tmp_path, edit):
    """NaN weights were blamed on the learning rate at --init-from's first step, and on the policy's
    probabilities in play; int32 weights of the same bytes were cast and played."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    run = tmp_path / "cnn"
    train(config(data, run, model="cnn", image_size=None, steps=2, evals=1), progress=False)
    ckpt = shutil.copytree(run / "final", tmp_path / "bad")
    weights = load_file(ckpt / "cnn.safetensors")
    name = next(iter(weights))
    if edit == "nan":
        weights[name][...] = float("nan")
    else:
        weights[name] = weights[name].view(torch.int32)
    save_file(weights, ckpt / "cnn.safetensors")
    with pytest.raises(ValueError, match=rf"cnn\.safetensors: {name}: "):
        load_checkpoint(ckpt)


@pytest.mark.parametrize(
    "asked,named", [(["--sources", "expert2f,dagger9"], "dagger9"), (["--games", "Pong,Freeway"], "Freeway")]
)
def test_a_source_or_game_asked_for_and_absent_is_refused_not_skipped(data, tmp_path, capsys, asked, named):
    """It trained on the rest, exit 0, and its training.json listed the source it never saw (an outside
    review of the DAgger path)."""
    from laya_policy.cli import main

    out = tmp_path / "run"
    argv = ["train", "--data", str(data), "--out", str(out), "--model", "cnn", "--steps", "2", "--evals", "1"]
    assert main([*argv, *asked]) == 2
    err = capsys.readouterr().err
    assert f"{asked[0]} {named}: no training records" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


def test_a_game_not_ready_is_named_not_passed_over_in_silence(data, tmp_path, capsys):
    import shutil

    copy = shutil.copytree(data, tmp_path / "data")
    (copy / "expert2f" / "Breakout" / "_READY").unlink()
    train(config(copy, tmp_path / "run", model="cnn", image_size=None, steps=2, evals=1), progress=False)
    err = capsys.readouterr().err
    assert "expert2f/Breakout is not ready (no _READY)" in err and "trains without it" in err, err


def test_a_packed_folder_replaced_while_it_is_read_is_refused(data, tmp_path):
    """Train read one pack's train split and another's, or the other's val split, in silence (an
    outside review: pack --force beside it)."""
    import subprocess
    import sys

    from atari_data.publish.pack import PackConfig, pack

    from ..swaps import SWAPPED_MID_READ

    out = tmp_path / "packed"
    for folder in (out, tmp_path / "packed.next"):
        pack(PackConfig(root=str(data), out=str(folder), formats=("parquet",)))
    argv = ["train", "--data", str(out), "--out", str(tmp_path / "run"), "--model", "cnn", "--steps", "2"]
    done = subprocess.run(
        [sys.executable, "-c", SWAPPED_MID_READ, "laya_policy.cli:main", str(out), *argv, "--evals", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (tmp_path / "packed.old").is_dir(), "the folder was swapped mid-read"
    assert done.returncode == 2 and "was replaced while it was read" in done.stderr, done.stderr[-2000:]


def test_a_resume_on_data_generated_again_at_the_same_path_is_refused(data, tmp_path, capsys):
    """Regenerated with another seed and the same sizes, the data passed the plan (its path and group
    sizes): the run went on from weights trained and selected on the old data (an outside review)."""
    import shutil

    from atari_data.produce.generate import GenerateConfig, generate_game
    from laya_policy.cli import main

    copy = shutil.copytree(data, tmp_path / "data")
    out = tmp_path / "run"
    with pytest.raises(CrashForTesting):
        train(config(copy, out, model="cnn", image_size=None, steps=8, crash_at_step=5), progress=False)
    again = dict(train_frames=60, val_frames=16, min_train_episodes=1, decision_cap=80, baseline_episodes=0)
    generate_game(GenerateConfig(root=str(copy), seed=1, force=True, **again), "Pong")
    argv = ["train", "--data", str(copy), "--out", str(out), "--model", "cnn", "--batch", "4", "--steps", "8"]
    assert main([*argv, "--evals", "2"]) == 2
    err = capsys.readouterr().err
    assert "holds other training records than the run started on" in err, err


def test_training_on_a_packed_folder_writes_nothing_in_the_datasets_cache(data, tmp_path, monkeypatch):
    """Each run left a lock file in ~/.cache/huggingface/datasets, outside its --out (an outside review)."""
    import datasets

    from atari_data.publish.pack import PackConfig, pack

    cache = tmp_path / "hf-datasets"
    cache.mkdir()
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache)
    packed = tmp_path / "packed"
    pack(PackConfig(root=str(data), out=str(packed), formats=("parquet",)))
    train(config(packed, tmp_path / "run", model="cnn", image_size=None, steps=2, evals=1), progress=False)
    assert not list(cache.rglob("*")), list(cache.rglob("*"))[:5]
