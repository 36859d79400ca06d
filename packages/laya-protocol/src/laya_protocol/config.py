"""Command-line flags built from a config dataclass, so that a setting's default and help are
written once, on its field (the way CleanRL writes its ``Args``), and every CLI of the workspace
builds its flags the same way.

    @dataclass
    class RunConfig:
        games: list[str] = option(help="ALE v5 game names, comma-separated")
        episodes: int = option(10, "per game")

    add_options(parser, RunConfig)        # --games (required), --episodes (default 10)
    cfg = from_args(RunConfig, parser.parse_args())

A field becomes ``--field-name``. Its type gives the parsing: ``bool`` a switch, ``list[str]`` a
comma-separated list, ``int``/``float``/``str`` themselves (``X | None`` as ``X``), anything else
through the ``parse`` the field names. A field without a default is a required flag; ``cli=False``
keeps a field off the command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import MISSING


def option(
    default=MISSING,
    help: str = "",
    *,
    factory=MISSING,
    choices=None,
    parse=None,
    shown: str | None = None,
    cli: bool = True,
):
    """A config field with its help text. ``shown`` replaces the default in the help (say what a
    ``None`` default means); ``parse`` turns the flag's text into the value."""
    meta = {"help": help, "choices": choices, "parse": parse, "shown": shown, "cli": cli}
    return dataclasses.field(default=default, default_factory=factory, metadata=meta)


def csv(text: str) -> list[str]:
    """A comma-separated list of names."""
    return [x.strip() for x in text.split(",") if x.strip()]


def listed(cfg) -> None:
    """Each list field of ``cfg`` given as one string (``games="Pong,Breakout"`` from Python) taken as
    its flag takes it, a comma-separated list: iterated as it came, "Pong" was four one-letter games."""
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if isinstance(value, str) and typing.get_origin(_base(hints[f.name])) is list:
            object.__setattr__(cfg, f.name, csv(value))


def _base(tp):
    """``X`` of ``X | None``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0] if len(args) == 1 else tp
    return tp


def _default(f: dataclasses.Field):
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def _show(value) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(map(str, value))
    return str(value)


def add_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup, cls, *, skip=(), **defaults) -> None:
    """One flag per field of ``cls`` (except ``skip`` and ``cli=False`` fields); ``defaults``
    replace a field's default for this parser only."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        meta = f.metadata
        if f.name in skip or not meta.get("cli", True) or not f.init:
            continue
        flag = "--" + f.name.replace("_", "-")
        default = defaults.get(f.name, _default(f))
        kind = _base(hints[f.name])
        kwargs: dict = {"dest": f.name, "help": meta.get("help", "")}
        if kind is bool:
            parser.add_argument(
                flag,
                action="store_true",
                default=bool(default) if default is not MISSING else False,
                help=kwargs["help"],
            )
            continue
        if meta.get("parse"):
            kwargs["type"] = meta["parse"]
        elif typing.get_origin(kind) is list:
            kwargs["type"] = csv
        elif kind in (int, float, str):
            kwargs["type"] = kind
        if meta.get("choices"):
            kwargs["choices"] = meta["choices"]
        if default is MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
            shown = meta.get("shown") or (None if default is None else _show(default))
            if shown is not None:
                kwargs["help"] = f"{kwargs['help']} (default {shown})".lstrip()
        parser.add_argument(flag, **kwargs)


def add_version(parser: argparse.ArgumentParser, distribution: str) -> None:
    """``--version``: the installed version of ``distribution`` (from its metadata, its one home)."""
    from importlib.metadata import version

    parser.add_argument("--version", action="version", version=f"%(prog)s {version(distribution)}")


def from_args(cls, args: argparse.Namespace, **extra):
    """``cls`` built from the parsed flags its fields define; ``extra`` adds or replaces values."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    return cls(**{**{k: v for k, v in vars(args).items() if k in names}, **extra})
