"""Game decisions as PyTorch batches, whatever game each row is from.

    from torch.utils.data import DataLoader
    from atari_data.torch import AtariDataset, collate

    ds = AtariDataset("data/atari", "expert2f")              # a layout root: every game of a source
    ds = AtariDataset("out/atari", "expert2f-Pong")          # a packed folder or a Hub id: any config
    loader = DataLoader(ds, batch_size=32, shuffle=True, collate_fn=collate)
    batch = next(iter(loader))
    batch["image"]    # uint8 [B, H, W, C] (and "prev_image" for two-frame sources)
    batch["options"]  # bool [B, 18]: which of the padded option slots are the row's buttons
    batch["label"]    # long [B]: index of the chosen option
    batch["target"]   # float [B, 18]: the expert's distribution, or one-hot; 0 off the options

Games have different buttons (Breakout 4, Pong 6, Boxing 18), so a row's ``target`` has as many
entries as its options; ``collate`` pads every row to the 18 ALE buttons with a mask, which is what
a shuffled loader over several games needs. Slot ``i`` is option ``i`` of that row's ``actions``
(kept as lists). Needs torch (``pip install atari-data[torch]``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from atari_data.errors import AtariDataError
from atari_data.layout import list_games
from atari_data.layout.png import decode_frame
from atari_data.layout.records import row_problem
from atari_data.limits import read_bytes
from atari_data.publish.card import check_files, default_config, frame_want, read_card, split_files
from atari_data.publish.hub import resolve_repo
from atari_data.publish.repo import data_kind, split_config
from atari_data.schema import FRAME_FIELDS, JSON_TEXT, target_of
from laya_protocol.games import FULL_ACTIONS
from laya_protocol.names import HUB_SPLITS

#: Option slots per row: the full ALE action set, the most buttons any game has.
SLOTS = len(FULL_ACTIONS)
_LAYOUT_SPLIT = {hub: layout for layout, hub in HUB_SPLITS.items()}


class AtariDataset(torch.utils.data.Dataset):
    """Rows of a layout root, a packed folder, a Hub dataset id, or a ``datasets.Dataset`` of records.

    ``config`` is a source (``expert2f``) or one game of it (``expert2f-Pong``); ``split`` is
    ``train`` or ``validation``. Rows are dicts: frames as uint8 arrays (decoded by atari-data's
    decoder, within the frame limit), ``question`` and ``provenance`` as mappings, the other fields
    as stored; a row that does not read is one AtariDataError naming it."""

    def __init__(self, data: Any, config: str | None = None, split: str = "train"):
        if split not in _LAYOUT_SPLIT:
            raise AtariDataError(f"{split!r} is not a split ({', '.join(_LAYOUT_SPLIT)})", field="split")
        self._layout: list[tuple[Any, dict]] | None = None
        self._folder: tuple[Path, str] | None = None  # a packed folder and source: whose meta says each frame's size
        self._wants: dict = {}  # frame_want's cache
        self._questions: dict = {}  # row_problem's cache of the questions asked
        self._game = split_config(config)[1] if config else None
        kind = data_kind(data) if isinstance(data, (str, Path)) else None
        if kind == "layout":
            if config is None:
                raise AtariDataError("name a source (or source-Game) of the layout", file=str(data), field="config")
            source, game = split_config(config)
            games = list_games(data, [source], [game] if game else None)
            if not games:
                raise AtariDataError(f"has no ready games of {config}", file=str(data), field="config")
            self._layout = [(g, rec) for g in games for rec in g.records(_LAYOUT_SPLIT[split])]
        elif isinstance(data, (str, Path)):
            from datasets import load_dataset

            # A Hub id is fetched first (the card, this config's Parquet files and meta files) into the snapshot folder
            # of its revision. Its card and files were written by someone: checked, then exactly those
            # files are read. A local folder is built afresh: datasets keys its cache of local files on
            # their paths, so this folder re-packed would otherwise be read from an old build.
            fresh = "force_redownload" if kind == "packed" else None
            folder = (
                Path(data)
                if fresh
                else resolve_repo(str(data), tars=False, configs=None if config is None else [config])
            )
            card = read_card(folder)  # once: the config chosen and the files checked come from one reading
            name = config or default_config(card)
            paths = [str(p) for p in split_files(check_files(folder, [name], card)[name], name, split, folder)]
            self._folder = folder, split_config(name)[0]
            self._rows = _frames_as_bytes(
                load_dataset("parquet", data_files={split: paths}, split=split, download_mode=fresh)
            )
        else:
            from datasets import Dataset

            if not isinstance(data, Dataset):  # indexed by row: a stream is not, nor a dict of splits
                raise AtariDataError(
                    f"{type(data).__name__} is not a map-style dataset of records (a datasets.Dataset: name a "
                    "split, and leave streaming out), nor a layout root, packed folder or Hub id",
                    field="data",
                )
            self._rows = _frames_as_bytes(data)
        self._own = not isinstance(data, (str, Path))  # a Dataset the caller built: its frame paths are theirs

    def __len__(self) -> int:
        return len(self._layout) if self._layout is not None else len(self._rows)

    def __getitem__(self, i: int) -> dict:
        if self._layout is not None:
            g, rec = self._layout[i]
            row = dict(rec)
            row["image"] = g.frame(rec)
            if "prev_image" in rec:
                row["prev_image"] = g.frame(rec, prev=True)
            return row
        row = dict(self._rows[i])
        where = f"row {i} ({row.get('id')})"
        for key in JSON_TEXT & row.keys():
            if isinstance(row[key], str):
                try:
                    row[key] = json.loads(row[key])
                except (ValueError, RecursionError) as e:
                    raise AtariDataError(f"is not valid JSON ({str(e)[:120]})", file=where, field=key) from None
        if not self._own:  # a folder's or Hub id's rows, which a stranger wrote: what doctor refuses, refused
            # here too (a label past the options would fail at collate; a row of another game in a
            # game's config would train as that game). A Dataset the caller built holds rows of their own.
            fields = {k: v for k, v in row.items() if k not in FRAME_FIELDS and v is not None}
            problem = row_problem(fields, row.get("prev_image") is not None, self._questions)
            if problem is None and self._game is not None and row.get("game") != self._game:
                problem = ("game", f"{row.get('game')!r} in the config of {self._game}")
            if problem is not None:
                raise AtariDataError(problem[1], file=where, field=problem[0])
        # the row's own fields checked first: then its game's meta says what its frames must be
        want = None if self._folder is None else frame_want(*self._folder, row.get("game"), self._wants)
        for key in FRAME_FIELDS:
            cell = row.get(key)
            if cell is None:
                row.pop(key, None)
            elif isinstance(cell, dict):  # bytes, as _frames_as_bytes asked: decoded here, within the limits
                try:
                    row[key] = decode_frame(_frame_bytes_of(cell, self._own, where, key), want)
                except ValueError as e:
                    raise AtariDataError(str(e), file=where, field=key) from None
            else:
                row[key] = np.asarray(cell)
        return row


def _frame_bytes_of(cell: dict, own: bool, where: str, key: str) -> bytes:
    """A frame cell's bytes; a cell holding only a path is read when the caller built the dataset
    (its own files), never for a folder or Hub id, whose paths a stranger wrote."""
    if cell.get("bytes"):
        return cell["bytes"]
    if own and cell.get("path"):
        try:
            return read_bytes(cell["path"], "frame", key)
        except OSError as e:
            raise AtariDataError(f"cannot read {cell['path']} ({e.strerror or e})", file=where, field=key) from None
    why = "has no bytes (a frame stored as a path is read only from a Dataset you built)"
    raise AtariDataError(why, file=where, field=key)


def _frames_as_bytes(rows):
    """A ``datasets.Dataset`` whose frame columns give bytes, not Pillow images: Pillow would decode
    any format it knows at any size; atari-data's decoder takes PNG or JPEG within the frame limit."""
    from datasets import Image

    features = getattr(rows, "features", None) or {}
    for key in FRAME_FIELDS:
        if isinstance(features.get(key), Image) and features[key].decode:
            rows = rows.cast_column(key, Image(decode=False))
    return rows


def collate(rows: list[dict]) -> dict:
    """Stack frames, pad options to :data:`SLOTS` with a mask; other fields stay lists."""
    n = len(rows)
    options = torch.zeros(n, SLOTS, dtype=torch.bool)
    target = torch.zeros(n, SLOTS, dtype=torch.float32)
    for i, row in enumerate(rows):
        k = len(row["actions"])
        if k > SLOTS:
            raise AtariDataError(f"has {k} options, over the {SLOTS} slots", file=str(row.get("id")), field="actions")
        options[i, :k] = True
        if type(row.get("label")) is not int or not 0 <= row["label"] < k:  # a Dataset the caller built is not checked
            raise AtariDataError(f"is not an index into its {k} options", file=str(row.get("id")), field="label")
        target[i, :k] = torch.tensor(target_of(row), dtype=torch.float32)
    batch: dict[str, Any] = {
        "options": options,
        "target": target,
        "label": torch.tensor([row["label"] for row in rows], dtype=torch.long),
    }
    for key in sorted(FRAME_FIELDS):
        frames = [row[key] for row in rows if key in row]
        if not frames:
            continue
        if len(frames) != n or len({f.shape for f in frames}) != 1:
            raise AtariDataError(
                f"rows mix {sorted({str(f.shape) for f in frames})} frames{'' if len(frames) == n else ' and none'}; "
                "batch one frame format (one platform, one frame count) at a time",
                field=key,
            )
        batch[key] = torch.from_numpy(np.stack(frames))
    for key in rows[0]:
        if key not in batch:
            batch[key] = [row.get(key) for row in rows]
    return batch
