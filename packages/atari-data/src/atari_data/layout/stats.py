"""Per (source, game) statistics of a layout, as a polars table."""

from __future__ import annotations

import io
import json
import math
import signal
from typing import cast

from atari_data.errors import AtariDataError
from atari_data.layout import META as META_FILE
from atari_data.layout import list_games, parse_json_line
from atari_data.limits import limit, open_regular
from atari_data.schema import META, check_structure
from atari_data.signals import kept

with kept(signal.SIGINT):  # polars' import takes over Ctrl-C (atari_data.signals); the first import is here
    import polars as pl


def entropy_bits(counts: dict[str, int]) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c) if total else 0.0


def stats_table(root, sources=None, games=None) -> pl.DataFrame:
    """One row per game folder: records, episodes, frame format, labels and their entropy, readiness."""
    rows = []
    for g in list_games(root, sources, games, ready_only=False):
        row = {"source": g.source, "game": g.game, "ready": g.ready}
        meta = g.meta() if g.ready else {}  # a broken meta.json of a ready game is one-line error, not a blank row
        defects = check_structure(meta, META) if g.ready else []
        if defects:
            f, msg = defects[0]
            raise AtariDataError(msg, file=str(g.path / META_FILE), field=f)
        train, val = meta.get("train", {}), meta.get("val", {})
        labels = train.get("labels", {})
        row.update(
            frames=meta.get("frames"),
            frame_format=meta.get("frame_format"),
            train=train.get("records"),
            val=val.get("records"),
            train_episodes=train.get("episodes"),
            val_episodes=val.get("episodes"),
            labels=json.dumps(labels) if labels else None,
            label_entropy_bits=round(entropy_bits(labels), 3) + 0.0 if labels else None,  # no -0.0
            target=_has_target(g) if g.ready else None,
        )
        rows.append(row)
    schema = {
        "source": pl.String,
        "game": pl.String,
        "ready": pl.Boolean,
        "frames": pl.Int64,
        "frame_format": pl.String,
        "train": pl.Int64,
        "val": pl.Int64,
        "train_episodes": pl.Int64,
        "val_episodes": pl.Int64,
        "labels": pl.String,
        "label_entropy_bits": pl.Float64,
        "target": pl.Boolean,
    }
    return pl.DataFrame(rows, schema=schema)


def _has_target(g) -> bool | None:
    """Whether the first train record has a soft target (None when it cannot be told)."""
    try:
        with open_regular(g.split_file("train")) as f:  # buffered: unbuffered, readline read a byte a call
            line = io.BufferedReader(cast(io.RawIOBase, f)).readline(limit("record") + 1)
        rec = parse_json_line(line, str(g.split_file("train")), 1, "(record)") if line else None
    except (OSError, AtariDataError):
        return None
    return "target" in rec if isinstance(rec, dict) else None
