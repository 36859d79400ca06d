"""Training examples from any atari-data source: a layout root, a packed repository folder, or a Hub id.

    examples = load_examples("data/atari", "train", sources=["expert2f"], games=["Pong"])
    ex.rec["question"], ex.rec["label"], ex.rec.get("target"); ex.frames(2)  # uint8 [2, H, W, 3]

A layout root is read record by record (frames decoded from its PNGs when a batch needs them). A
packed repository (a folder written by ``atari-data pack``, or its Hub id) is read by its configs:
the source's config or, with games named, those games' own configs. A Hub id's card is fetched
first, then those configs' Parquet files and their games' meta files (or all are found in the Hub
cache, offline), into the snapshot folder of its revision. The card and the files its configs name are checked
(``atari_data.publish.card.check_files``), and exactly those files are streamed through
``datasets.load_dataset("parquet", data_files=...)``, so rows come from them as they are, never
from a cache of an older build.
Frames stay PNG bytes, decoded per batch, so memory holds compressed frames; each frame's header is
read at load and its pixels when decoded, against its game's frame_format.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from functools import partial
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import META, list_games, read_jsonl
from atari_data.layout.png import declared_size_problem, decode_frame
from atari_data.layout.records import GameRules, row_problem
from atari_data.publish.card import check_files, frame_want, read_card
from atari_data.publish.hub import resolve_repo
from atari_data.publish.repo import data_kind, split_config
from atari_data.publish.teardown import own_cache, streaming
from laya_protocol.names import HUB_SPLITS


class Example:
    """One decision: its record (``question`` as a dict), a way to get its frames, and a key per frame
    (what a frame cache files it under: two records that name the same image share it)."""

    __slots__ = ("rec", "_frame", "_where")

    def __init__(self, rec: dict, frame: Callable[[bool], np.ndarray], where: Hashable):
        self.rec, self._frame, self._where = rec, frame, where

    @property
    def group(self) -> tuple[str, str]:
        return self.rec["game"], self.rec["source"]

    def frames(self, n: int) -> list[np.ndarray]:
        """``n`` frames, oldest first; a one-frame source's previous frame is its current one."""
        current = self._frame(False)
        if n == 1:
            return [current]
        return [self._frame(True) if "prev_image" in self.rec else current, current]

    def frame_keys(self, n: int) -> list[Hashable]:
        """The cache keys of :meth:`frames`, in the same order."""
        current = (self._where, False)
        if n == 1:
            return [current]
        return [(self._where, True) if "prev_image" in self.rec else current, current]


def load_examples(
    data: str, split: str, sources: list[str] | None = None, games: list[str] | None = None
) -> list[Example]:
    kind = data_kind(data)
    if kind == "layout":
        return _layout_examples(data, split, sources, games)
    return _packed_examples(data, split, sources, games, on_hub=kind == "hub")


def _layout_examples(root, split, sources, games) -> list[Example]:
    """Every record of the ready games, each checked as the validator checks it (a ready folder may
    still have been edited by hand): a defect is one AtariDataError naming file, line and field."""
    out = []
    for g in list_games(root, sources, games):
        pin = g.pin()  # before its records are read: a game swapped in later is caught at its frames
        meta = g.meta()
        try:
            rules = GameRules(g.source, g.game, tuple(meta["actions"]), meta["frames"], meta.get("platform", "ale"))
        except (KeyError, TypeError, ValueError) as e:
            raise AtariDataError(
                f"is not a usable meta.json ({type(e).__name__}: {e})", file=str(g.path / META), field="(file)"
            ) from None
        for n, rec in read_jsonl(g.split_file(split)):
            defects = rules.check(rec)
            if defects:
                field, msg = defects[0]
                raise AtariDataError(msg, file=str(g.split_file(split)), line=n, field=field)
            out.append(Example(rec, partial(_layout_frame, g, pin, rec), (str(g.path), rec["image"])))
    return out


def _layout_frame(g, pin, rec: dict, prev: bool) -> np.ndarray:
    """A frame of the game folder the records were read from: one swapped in since (generate --force)
    would pair these labels with its frames."""
    try:
        frame = g.frame(rec, prev=prev)
    except (AtariDataError, OSError):
        pin.unchanged("train")  # a frame gone with the old folder says why
        raise
    pin.unchanged("train")
    return frame


def _packed_frame(current: bytes, previous: bytes | None, want, where: str, prev: bool) -> np.ndarray:
    return _decode(previous if prev and previous is not None else current, want, where)  # prev only when stored


def _packed_examples(data, split, sources, games, on_hub: bool) -> list[Example]:
    from datasets import Image, load_dataset

    hf_split = HUB_SPLITS[split]
    out = []
    hub_id = data if on_hub else None
    # The card and files were written by someone: checked, and exactly the files checked are read: the
    # card first (a Hub id's fetched alone), then only the configs chosen from it, so one game of a
    # 57-game folder costs that game's files.
    card = read_card(Path(data) if hub_id is None else resolve_repo(hub_id, configs=[]))
    configs = [c["config_name"] for c in card.get("configs") or []]
    # A source's own config, or with games named, only those games' configs (only their files are read).
    pairs = {split_config(c): c for c in configs}  # (source, game or None) -> config name
    wanted = []
    for (source, game), name in pairs.items():
        if sources and source not in sources:
            continue
        named = [g for g in games or () if (source, g) in pairs]
        if (game is None and not named) or (game is not None and game in named):
            wanted.append(name)
    if hub_id is not None:  # into the snapshot folder of its revision (or found there, offline)
        data = str(resolve_repo(hub_id, tars=False, configs=wanted))
    checked = check_files(Path(data), wanted)
    questions: dict = {}  # (game, actions) -> the questions its platforms ask
    wants: dict = {}  # (source, game) -> the frames' (mode, (width, height)) its meta file says
    with own_cache() as cache:
        for name in wanted:
            if hf_split not in checked[name]:  # e.g. a game without validation rows
                continue
            # Streamed: the files as they are now, never a cache of an older build.
            streaming()  # the command's end frees the readers (atari_data.publish.teardown)
            files = {hf_split: [str(p) for p in checked[name][hf_split]]}
            ds = load_dataset("parquet", data_files=files, split=hf_split, streaming=True, cache_dir=cache)
            ds = ds.cast_column("image", Image(decode=False))
            has_prev = "prev_image" in (ds.features or {})
            if has_prev:
                ds = ds.cast_column("prev_image", Image(decode=False))
            if games:
                ds = ds.filter(lambda g: g in games, input_columns="game")
            for i, row in enumerate(ds):
                where = f"{data}: {name}/{hf_split} row {i}"
                image, prev = row.pop("image"), row.pop("prev_image", None) if has_prev else None
                for key, value in (("image", image), ("prev_image", prev)):
                    if (value is not None or key == "image") and not (
                        isinstance(value, dict) and isinstance(value.get("bytes"), bytes) and value["bytes"]
                    ):
                        raise ValueError(f"{where}: {key}: has no image bytes")
                rec = {k: v for k, v in row.items() if v is not None}
                try:
                    rec["question"] = json.loads(rec["question"])
                except (KeyError, TypeError, ValueError, RecursionError):
                    raise ValueError(f"{where}: question: is not the JSON of a question") from None
                problem = row_problem(rec, prev is not None, questions)
                if problem:
                    raise ValueError(f"{where}: {problem[0]}: {problem[1]}")
                want = frame_want(Path(data), split_config(name)[0], rec.get("game"), wants)
                for key, value in (("image", image), ("prev_image", prev)):  # every frame's header, before training
                    if value is not None and (said := declared_size_problem(value["bytes"], want)):
                        raise ValueError(f"{where}: {key}: {said}")
                if prev is not None:
                    rec["prev_image"] = "packed"
                frame = partial(_packed_frame, image["bytes"], prev and prev["bytes"], want, where)
                out.append(Example(rec, frame, where))
    return out


def _decode(data: bytes, want, where: str) -> np.ndarray:
    import zlib

    try:
        return decode_frame(data, want)
    except (OSError, ValueError, zlib.error) as e:
        raise ValueError(f"{where}: image: does not decode ({type(e).__name__}: {e})") from None
