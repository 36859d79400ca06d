"""Flags come from the config dataclasses: a default written on a field is the CLI's default."""

import argparse
from dataclasses import dataclass

import pytest

from laya_protocol.config import add_options, from_args, option


@dataclass
class Example:
    games: list[str] = option(help="comma-separated")
    episodes: int = option(10, "per game")
    cap: int | None = option(None, "decisions", shown="none")
    ratio: float = option(0.5)
    mode: str = option("a", choices=("a", "b"))
    force: bool = option(False, "redo")
    hidden: float = option(1.0, cli=False)


def _parse(cls, argv):
    p = argparse.ArgumentParser(exit_on_error=False)
    add_options(p, cls)
    return p, p.parse_args(argv)


def test_types_defaults_and_required_flags():
    p, a = _parse(Example, ["--games", "Pong, Breakout,"])
    cfg = from_args(Example, a)
    assert cfg == Example(games=["Pong", "Breakout"])
    cfg = from_args(
        Example,
        _parse(Example, ["--games", "Pong", "--episodes", "3", "--cap", "7", "--ratio", "2", "--mode", "b", "--force"])[
            1
        ],
    )
    assert (cfg.episodes, cfg.cap, cfg.ratio, cfg.mode, cfg.force, cfg.hidden) == (3, 7, 2.0, "b", True, 1.0)
    help_text = p.format_help()
    assert "--hidden" not in help_text and "(default 10)" in help_text and "(default none)" in help_text
    with pytest.raises(SystemExit):
        p.parse_args([])  # --games is required
    with pytest.raises((SystemExit, argparse.ArgumentError)):
        p.parse_args(["--games", "x", "--mode", "c"])


def _cli_defaults(parser: argparse.ArgumentParser, command: str, argv: list[str]) -> argparse.Namespace:
    return parser.parse_args([command, *argv])


@pytest.mark.parametrize(
    "package,command,cls,argv",
    [
        ("atari_data", "generate", "atari_data.produce.generate:GenerateConfig", ["--root", "r"]),
        ("laya_eval", "run", "laya_eval.evaluate:RunConfig", ["--policy", "random", "--games", "Pong"]),
        ("laya_policy", "train", "laya_policy.settings:TrainConfig", ["--data", "d"]),
        (
            "laya_policy",
            "dagger",
            "atari_data.produce.dagger:DaggerConfig",
            ["--model", "m", "--root", "r", "--games", "Pong", "--round", "1"],
        ),
        ("laya_policy", "quickstart", "laya_policy.settings:QuickstartConfig", []),
    ],
)
def test_every_cli_default_is_its_config_default(package, command, cls, argv):
    import importlib

    module, name = cls.split(":")
    config = getattr(importlib.import_module(module), name)
    parser = importlib.import_module(f"{package}.cli").build_parser()
    args = _cli_defaults(parser, command, argv)
    built = from_args(config, args, **({"epsilon": config.epsilon} if command == "generate" else {}))
    required = {k: getattr(built, k) for k in ("root", "games", "policy", "data", "round") if hasattr(built, k)}
    if command == "dagger":
        required = {k: getattr(built, k) for k in ("root", "games", "round")}
    assert built == config(**required)


@pytest.mark.parametrize(
    "cls,required",
    [
        ("atari_data.produce.generate:GenerateConfig", {"root": "r"}),
        ("laya_eval.evaluate:RunConfig", {"policy": "random"}),
        ("laya_policy.settings:TrainConfig", {"data": "d", "sources": "expert2f"}),
        ("atari_data.produce.dagger:DaggerConfig", {"root": "r", "round": 1}),
        ("laya_policy.settings:QuickstartConfig", {}),
        ("atari_data.publish.pack:PackConfig", {"root": "r", "out": "o", "sources": "expert2f"}),
    ],
)
def test_a_list_given_from_python_as_one_string_is_the_flags_list(cls, required):
    """From a researcher's review: games="Pong" from Python was iterated letter by letter ("unknown
    ALE v5 game 'P'", "--games P: no training records"). A string is what the flag takes: a
    comma-separated list."""
    import importlib

    module, name = cls.split(":")
    config = getattr(importlib.import_module(module), name)
    lists = {k: [v] for k, v in required.items() if k == "sources"}
    given = config(**required, games="Pong, Breakout")
    assert given == config(**{**required, **lists}, games=["Pong", "Breakout"])


@pytest.mark.parametrize("package", ["atari_data", "laya_eval", "laya_policy"])
def test_each_command_line_is_read_and_explained_without_torch(package):
    """`laya-policy --help` and every flag it refuses waited 3-4 s on two cores for torch, which the
    parser imported for TrainConfig's help: the settings now live apart from the code that trains.
    A fresh process builds each parser, asks every command's help, and must not have imported torch."""
    import subprocess
    import sys

    script = f"""
import contextlib, io, sys
from {package}.cli import build_parser
parser = build_parser()
commands = next(a for a in parser._actions if a.dest == "command").choices
for name in commands:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
        parser.parse_args([name, "--help"])
    assert "usage:" in out.getvalue(), name
print(len(commands), "torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    count, torch = done.stdout.split()
    assert int(count) >= 2 and torch == "False", done.stdout


@pytest.mark.parametrize(
    "argv,said",
    [
        (["train", "--data", "d", "--out", "o", "--batch", "0"], "--batch 0: expected 1 or more"),
        (["train", "--data", "d", "--image-size", "100"], "--image-size 100: expected a positive multiple of 64"),
        (["train", "--data", "d", "--model", "cnn", "--lr-backbone", "1e-4"], "--lr-backbone: the cnn has no backbone"),
        (["push", "ckpt", "--repo", "me/a..b"], "--repo 'me/a..b' is a name the Hub refuses"),
        (["push", "ckpt", "--repo", "me/x", "--license", "MIT License"], "--license 'MIT License': expected"),
    ],
)
def test_a_value_no_run_takes_is_refused_before_torch_loads(argv, said, tmp_path):
    """`laya-policy train --batch 0` and `push --repo me/a..b` answered after torch's import (3-4 s on
    two cores); neither value needs a model to refuse."""
    import subprocess
    import sys

    script = f"""
import sys
from laya_policy.cli import main
code = main({argv!r})
print(code, "torch" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.stdout.split() == ["2", "False"], (done.stdout, done.stderr[-2000:])
    assert done.stderr.startswith(f"error: {said}") and done.stderr.count("\n") == 1, done.stderr
    assert not any(tmp_path.iterdir()), "nothing written"
