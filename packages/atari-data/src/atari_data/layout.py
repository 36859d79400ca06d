"""The layout on disk, and reading it back.

    <root>/<source>/<Game>/{train.jsonl, val.jsonl, images/, meta.json, _READY}
                            [episodes.jsonl: seeds and moves of played sources]

``_READY`` is written last, after every other file of the game is complete; readers use only
games that have it. Games are written by :mod:`atari_data.writer`.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.schema import GAME_RE, SOURCE_RE

SPLITS = ("train", "val")
READY = "_READY"
META = "meta.json"
#: Optional, for played sources: per episode the ALE seed and every move, so frames can be rebuilt.
EPISODES = "episodes.jsonl"


@dataclass(frozen=True)
class GameDir:
    """One (source, game) folder of a layout."""

    root: Path
    source: str
    game: str

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def path(self) -> Path:
        return self.root / self.source / self.game

    @property
    def ready(self) -> bool:
        return (self.path / READY).is_file()

    def split_file(self, split: str) -> Path:
        return self.path / f"{split}.jsonl"

    def meta(self) -> dict:
        return read_json(self.path / META)

    def records(self, split: str = "train") -> Iterator[dict]:
        """The records of one split, in file order."""
        path = self.split_file(split)
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as e:
                    raise AtariDataError(f"is not valid JSON ({e.msg})", file=str(path), line=n,
                                         field="(record)") from None

    def frame(self, rec: dict, prev: bool = False) -> np.ndarray:
        """A record's frame (or previous frame) as a uint8 array, H x W (gray) or H x W x 3."""
        from atari_data.png import decode_png

        rel = rec["prev_image" if prev else "image"]
        path = safe_join(self.path, rel)
        try:
            return decode_png(path.read_bytes())
        except (OSError, ValueError, zlib.error) as e:
            raise AtariDataError(f"cannot read frame ({e})", file=str(path), field="image") from None


def safe_join(base: Path, rel: str) -> Path:
    """``base / rel``, refusing paths that would leave ``base``."""
    p = Path(rel)
    if p.is_absolute() or ".." in p.parts:
        raise AtariDataError(f"path {rel!r} leaves the game folder", file=str(base), field="image")
    return base / p


def list_games(root: str | os.PathLike, sources=None, games=None, ready_only: bool = True) -> list[GameDir]:
    """The game folders under ``root``, sorted by (source, game); only ready ones by default."""
    root = Path(root)
    if not root.is_dir():
        raise AtariDataError("is not a directory", file=str(root), field="root")
    out = []
    for sdir in sorted(p for p in root.iterdir() if p.is_dir() and SOURCE_RE.match(p.name)):
        if sources and sdir.name not in sources:
            continue
        for gdir in sorted(p for p in sdir.iterdir() if p.is_dir() and GAME_RE.match(p.name)):
            if games and gdir.name not in games:
                continue
            g = GameDir(root, sdir.name, gdir.name)
            if g.ready or not ready_only:
                out.append(g)
    return out


def read_json(path: Path) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise AtariDataError("is missing", file=str(path), field="(file)") from None
    except json.JSONDecodeError as e:
        raise AtariDataError(f"is not valid JSON ({e.msg})", file=str(path), line=e.lineno,
                             field="(file)") from None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name, flushed to disk before the rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
