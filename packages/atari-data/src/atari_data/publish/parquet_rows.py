"""Reading a packed repository's Parquet files directly: the rows of one config and split, frames
decoded, without ``datasets`` in between.

``load_dataset(..., streaming=True)`` reads the same files at 1,400-3,100 rows a second on two
cores (Pillow decodes each frame, and every row passes through its feature casts); this reads a
row group at a time with pyarrow, after :mod:`atari_data.parquet` checked what it decodes to, and
decodes frames with atari-data's own decoder, a chunk of rows on each of up to 8 threads (one a
core; libdeflate lets go of the GIL), the previous frame of a row decoded only when it is not the row before's frame.
Rows are as ``load_dataset`` gives them (``question`` and ``provenance`` as JSON text), with
``image`` and ``prev_image`` as uint8 arrays, each row's its own.

    for row in rows("out/atari", "expert2f", "train"):
        row["image"], row["prev_image"], row["label"]
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from atari_data import parquet
from atari_data.errors import AtariDataError
from atari_data.layout.png import decode_frame
from atari_data.publish.card import check_files, frame_want, split_files
from atari_data.publish.repo import split_config
from atari_data.schema import FRAME_FIELDS
from atari_data.threads import frame_threads

#: Rows a thread decodes at a time: smaller chunks spend their time handing work over.
CHUNK = 64


def files(folder: Path, config: str, split: str) -> list[Path]:
    """The Parquet files the card of ``folder`` names for ``config`` and ``split``, checked as every
    reader of a packed folder checks them (:func:`atari_data.publish.card.check_files`)."""
    return split_files(check_files(folder, [config])[config], config, split, folder)


def rows(folder: str | Path, config: str, split: str = "train", threads: int | None = None) -> Iterator[dict]:
    """Every row of ``config``/``split`` in file order, frames decoded (see the module docstring). A
    row whose frame is missing or does not decode is one AtariDataError naming file, row and field."""
    folder = Path(folder)
    workers = threads or frame_threads()
    source = split_config(config)[0]
    seen: dict = {}  # frame_want's cache
    with ThreadPoolExecutor(workers, thread_name_prefix="parquet-frames") as pool:
        for path in files(folder, config, split):
            first = 0
            for table in parquet.row_groups(path):
                frames = {k: _frame_bytes(table, k, path) for k in FRAME_FIELDS if k in table.column_names}
                plain = table.drop_columns(list(frames)).to_pylist()
                wants = [frame_want(folder, source, row.get("game"), seen) for row in plain]  # before any decode
                ahead: deque = deque()  # two chunks a thread in flight: memory stays a few chunks' frames
                for start in range(0, len(plain), CHUNK):
                    ahead.append((start, pool.submit(_decode, frames, wants, start, start + CHUNK, path, first)))
                    if len(ahead) > 2 * workers:
                        yield from _joined(plain, *ahead.popleft())
                while ahead:
                    yield from _joined(plain, *ahead.popleft())
                first += len(plain)


def _joined(plain: list[dict], start: int, decoded) -> Iterator[dict]:
    for i, pixels in enumerate(decoded.result(), start):
        yield plain[i] | pixels


def _frame_bytes(table, key: str, path: Path) -> list:
    column = table.column(key).combine_chunks()
    if column.type.num_fields and column.type.get_field_index("bytes") < 0:
        raise AtariDataError("is a struct without frame bytes", file=str(path), field=key)
    return column.field("bytes").to_pylist() if column.type.num_fields else column.to_pylist()


def _decode(frames: dict[str, list], wants: list, start: int, stop: int, path: Path, first: int) -> list[dict]:
    """The decoded frames of rows ``start``..``stop`` of a row group (one thread's share)."""
    out, last, last_pixels = [], None, None
    image, prev = frames.get("image"), frames.get("prev_image")
    for i in range(start, min(stop, len(image or prev or ()))):
        row: dict[str, np.ndarray | None] = {}
        for key, cells in (("prev_image", prev), ("image", image)):  # the previous first: it is the last image
            data = cells[i] if cells is not None else None
            if data is None:
                if key == "image":
                    raise AtariDataError("has no frame bytes", file=str(path), field=f"row {first + i}: {key}")
                row[key] = None
                continue
            if not isinstance(data, bytes):
                raise AtariDataError("is not frame bytes", file=str(path), field=f"row {first + i}: {key}")
            if (data, wants[i]) == last and last_pixels is not None:  # decoded once, still each row's own array
                row[key] = last_pixels.copy()
                continue
            try:
                last, last_pixels = (data, wants[i]), decode_frame(data, wants[i])
            except ValueError as e:
                raise AtariDataError(str(e), file=str(path), field=f"row {first + i}: {key}") from None
            row[key] = last_pixels
        out.append(row)
    return out
