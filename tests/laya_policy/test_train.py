import json

import pytest

from atari_data.generate import GenerateConfig, generate_game
from laya_eval.evaluate import RunConfig, evaluate
from laya_policy.checkpoint import load_checkpoint
from laya_policy.train import CrashForTesting, TrainConfig, lr_factor, train


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("train-data")
    for game in ("Pong", "Breakout"):
        generate_game(GenerateConfig(root=str(root), train_frames=60, val_frames=16, min_train_episodes=1,
                                     decision_cap=80, baseline_episodes=0), game)
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
        {"accuracy", "nll", "ece"} <= set(g) for g in log[-1]["games"].values())
    assert sum(summary["samples_per_group"].values()) == 12 * 4
    assert "ece_before" in summary["calibration"]
    model, cfg = load_checkpoint(out / "final")
    assert cfg.image_size == 64 and cfg.frames == 2 and "choice" in cfg.temperatures
    assert (out / "best" / "vlm_agent_config.json").exists()


def test_the_trained_checkpoint_plays_in_laya_eval(data, tmp_path):
    out = tmp_path / "run"
    train(config(data, out, steps=4, evals=1), progress=False)
    res = evaluate(RunConfig(policy=f"laya:{out / 'final'}", games=["Pong"], episodes=2, cap=10, random_episodes=0,
                             out=str(tmp_path / "r.json")), progress=False)
    assert res["games"]["Pong"]["error"] is None


def test_restart_starts_over(data, tmp_path):
    out = tmp_path / "run"
    train(config(data, out, steps=4, evals=1), progress=False)
    summary = train(config(data, out, steps=6, evals=1, restart=True), progress=False)
    assert summary["steps"] == 6


def test_learning_rate_schedule():
    assert lr_factor(0, 100) == pytest.approx(1 / 3)
    assert lr_factor(3, 100) == pytest.approx(1.0)
    assert lr_factor(100, 100) == pytest.approx(0.1)


def test_calibration_is_fitted_only_on_held_out_games(data, tmp_path):
    summary = train(config(data, tmp_path / "a", games=["Pong"], steps=4, evals=1), progress=False)
    assert "skipped" in summary["calibration"]
    summary = train(config(data, tmp_path / "b", games=["Pong"], calibrate_on=["Breakout"], steps=4, evals=1),
                    progress=False)
    calib = summary["calibration"]
    assert calib["holdout"] == ["Breakout"]
    if "skipped" not in calib:  # an untrained model on an unseen game is rarely calibrated already
        assert calib["ece_after"] <= calib["ece_before"] + 1e-6
        _, cfg = load_checkpoint(tmp_path / "b" / "final")
        assert cfg.temperatures["choice"] == pytest.approx(calib["temperature"])


def test_train_cli_runs_and_reports_bad_input_on_one_line(data, tmp_path, capsys):
    from laya_policy.cli import main
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r"), "--steps", "3", "--batch", "2",
                 "--image-size", "64", "--evals", "1"]) == 0
    assert "3 steps" in capsys.readouterr().out
    assert main(["train", "--data", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is not a directory" in err and "Traceback" not in err
