"""Per (source, game) statistics of a layout, as a polars table."""

from __future__ import annotations

import json
import math

import polars as pl

from atari_data.errors import AtariDataError
from atari_data.layout import list_games


def entropy_bits(counts: dict[str, int]) -> float:
    total = sum(counts.values())
    return -sum(c / total * math.log2(c / total) for c in counts.values() if c) if total else 0.0


def stats_table(root, sources=None, games=None) -> pl.DataFrame:
    """One row per game folder: records, episodes, frame format, labels and their entropy, readiness."""
    rows = []
    for g in list_games(root, sources, games, ready_only=False):
        row = {"source": g.source, "game": g.game, "ready": g.ready}
        try:
            meta = g.meta() if g.ready else {}
        except AtariDataError:
            meta = {}
        train, val = meta.get("train", {}), meta.get("val", {})
        labels = train.get("labels", {})
        row.update(
            frames=meta.get("frames"), frame_format=meta.get("frame_format"),
            train=train.get("records"), val=val.get("records"),
            train_episodes=train.get("episodes"), val_episodes=val.get("episodes"),
            labels=json.dumps(labels) if labels else None,
            label_entropy_bits=round(entropy_bits(labels), 3) + 0.0 if labels else None,  # no -0.0
            target=_has_target(g) if g.ready else None,
        )
        rows.append(row)
    schema = {"source": pl.String, "game": pl.String, "ready": pl.Boolean, "frames": pl.Int64,
              "frame_format": pl.String, "train": pl.Int64, "val": pl.Int64, "train_episodes": pl.Int64,
              "val_episodes": pl.Int64, "labels": pl.String, "label_entropy_bits": pl.Float64,
              "target": pl.Boolean}
    return pl.DataFrame(rows, schema=schema)


def _has_target(g) -> bool | None:
    try:
        with open(g.split_file("train"), "rb") as f:
            line = f.readline()
        return "target" in json.loads(line) if line else None
    except (OSError, ValueError):
        return None
