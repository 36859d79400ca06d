"""Turn the ready games of a layout into a Hub-ready dataset repository folder, laid out as
:mod:`atari_data.publish.repo` says.

Shards per (source, game, split), with a config per source and one per game over the same files;
the Hub's split names. Parquet rows are the record fields, flat (frames as HF ``Image``,
``question`` and ``provenance`` as JSON text), with column statistics on ``game`` and ``episode``.
WebDataset samples (plain ustar members, :mod:`atari_data.publish.tar`) carry the same rows and also each side
image the record's provenance references (e.g. Frostbite's ``mask``; the Parquet rows keep only its
path). 8-bit grey and RGB PNG frames are re-compressed at libdeflate level 9 (``png_level``; other
images are copied): the pixels stay the same, Parquet shrinks to about a third (tools/bench/load.py).
Files are written in a fixed order with fixed metadata, so the same layout always packs to the same
bytes with the same libdeflate. The folder is built beside OUT and renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections import deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from atari_data.errors import AtariDataError
from atari_data.layout import (
    META,
    GameDir,
    OutputLock,
    copy_plain,
    join_plain,
    list_games,
    read_file,
    remove,
    set_aside,
    swap_into_place,
)
from atari_data.layout.png import LEVELS, formats_of, is_intact, recompress
from atari_data.layout.records import side_paths
from atari_data.publish import repo
from atari_data.publish.tar import TarWriter
from atari_data.schema import (
    FRAME_FIELDS,
    FRAME_FORMAT_RE,
    JSON_TEXT,
    SCHEMA_VERSION,
    encode_json,
    hf_features,
    json_schema,
)
from atari_data.threads import MAX_THREADS, frame_threads
from laya_protocol.config import listed
from laya_protocol.files import write_file, writing
from laya_protocol.names import HUB_SPLITS

log = logging.getLogger(__name__)

ROWS_PER_GROUP = 500
#: Records a thread reads, checks and re-compresses at a time (layout_rows).
CHUNK = 64
STATISTICS = ["game", "episode"]


def parse_size(text: str | int) -> int:
    """'512MB', '1GB', '300KB' or a number of bytes."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?B?)\s*", str(text).upper())
    if not m:
        raise AtariDataError(f"{text!r} is not a size like 512MB", field="--shard-size")
    unit = {"": 1, "B": 1, "K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9}[m[2]]
    size = int(float(m[1]) * unit)
    if size <= 0:
        raise AtariDataError(f"{text!r} must be positive", field="--shard-size")
    return size


@dataclass
class PackConfig:
    root: str
    out: str
    sources: list[str] | None = None
    games: list[str] | None = None
    shard_size: int = 512_000_000
    formats: tuple[str, ...] = ("parquet", "webdataset")
    force: bool = False
    name: str = "atari"
    replay: bool = False  # seeds, moves and frame MD5s instead of frames (atari_data.publish.replay)
    repo: str | None = None  # the Hub dataset id the card's examples load
    # libdeflate level of packed PNGs (1-12), None to copy them as written (generation writes fast);
    # 9: Parquet about a third the size, as fast to inflate, 0.3 ms a record more to pack on two cores
    # (tools/bench/load.py, docs/benchmarks.md)
    png_level: int | None = 9
    threads: int | None = None  # re-compressing threads; None: one a core (atari_data.threads)
    summary: dict = field(default_factory=dict, init=False)

    def __post_init__(self):
        listed(self)


def layout_rows(
    games: list[GameDir], split: str, level: int | None = None, threads: int | None = None
) -> Iterator[tuple[dict, bytes, bytes | None, dict[str, bytes]]]:
    """(record, image bytes, previous image bytes, side images by ``<name>.<ext>``) in a fixed order:
    games sorted, records as written. ``level`` re-compresses PNGs at that libdeflate level (same pixels).

    Frames are read and checked here; their re-compression, libdeflate's work, which lets go of
    the GIL, runs a chunk of records at a time on ``threads`` threads (one a core by default), at
    most two chunks a thread ahead; rows come out in order, the same bytes at any thread count."""
    if level is None:
        yield from _checked_rows(games, split)
        return
    workers = threads or frame_threads()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="pack-frames")
    try:
        ahead: deque = deque()
        chunk: list = []
        for row in _checked_rows(games, split):
            chunk.append(row)
            if len(chunk) == CHUNK:
                ahead.append(pool.submit(_recompressed, chunk, level))
                chunk = []
                if len(ahead) > 2 * workers:
                    yield from ahead.popleft().result()
        if chunk:
            ahead.append(pool.submit(_recompressed, chunk, level))
        while ahead:
            yield from ahead.popleft().result()
    finally:
        pool.shutdown(cancel_futures=True)


def _checked_rows(games: list[GameDir], split: str) -> Iterator[tuple[dict, bytes, bytes | None, dict[str, bytes]]]:
    for g in games:
        m = FRAME_FORMAT_RE.match(g.meta()["frame_format"])
        assert m is not None  # validated before packing
        size = (int(m[3]), int(m[2]))
        base = str(g.path)
        last: dict[tuple[str, bytes], bytes] = {}  # a previous frame is, as a rule, the last record's frame
        for rec in g.records(split):
            prev = _intact(base, rec["prev_image"], size, last) if "prev_image" in rec else None
            image = _intact(base, rec["image"], size, last)
            side = {repo.frame_ext(path, name): _intact(base, path, None) for name, path in side_paths(rec).items()}
            yield rec, image, prev, side


def _recompressed(chunk: list[tuple[dict, bytes, bytes | None, dict[str, bytes]]], level: int) -> list:
    """A chunk of rows with their PNGs re-compressed (one thread's share); a frame that is the
    previous one's is done once."""
    out, last, last_out = [], None, b""
    for rec, image, prev, side in chunk:
        frames = []
        for data in (prev, image):
            if data is not None and data is not last:
                last, last_out = data, recompress(data, level)
            frames.append(None if data is None else last_out)
        out.append((rec, frames[1], frames[0], {k: recompress(v, level) for k, v in side.items()}))
    return out


def _intact(base: str, rel: str, size: tuple[int, int] | None, last: dict | None = None) -> bytes:
    """A frame's bytes, refused when damaged or not as its name says (:func:`is_intact`: a PNG checked
    whole in one inflate, a JPEG's markers and header, the format its suffix names, its size the
    game's frame format). ``last`` keeps the latest file's bytes, so the same frame stored twice (a
    record's frame, the next one's previous frame) is checked once and comes back as the same
    object (which tells :func:`_recompressed` to re-compress it once)."""
    # A frame, or its folder, swapped for a link since validate: no-follow covers the last part only.
    path = join_plain(base, rel)
    data = read_file(path, "frame", "image", follow=False)
    formats = formats_of(rel)
    key = (formats, data)
    if last is not None and key in last:  # the same bytes under the same kind of name
        return last[key]
    if not is_intact(data, size, formats):  # only the format its name says
        raise AtariDataError(
            f"is not an intact {'frame' if size is None else f'{size[1]}x{size[0]} frame'} "
            "(run `atari-data validate --images`)",
            file=path,
            field="image",
        )
    if last is not None:
        last.clear()
        last[key] = data
    return data


def hf_row(rec: dict, image: bytes, prev: bytes | None, names) -> dict:
    """A record as a row of the HF features: frames as Image structs, free mappings as JSON text."""
    row: dict[str, Any] = {}
    for name in names:
        if name == "image":
            row[name] = {"bytes": image, "path": None}
        elif name == "prev_image":
            row[name] = {"bytes": prev, "path": None}
        elif name in JSON_TEXT:
            row[name] = encode_json(rec[name]) if name in rec else None
        else:
            row[name] = rec.get(name)
    return row


class _ParquetShards:
    def __init__(self, root: Path, source: str, game: str, split: str, frames: int, shard_size: int):
        import pyarrow as pa

        self.root, self.source, self.game, self.split, self.shard_size = root, source, game, split, shard_size
        self.folder = (root / repo.parquet_file(source, game, split, 0, 1)).parent  # where its shards are staged
        self.folder.mkdir(parents=True, exist_ok=True)
        self.features = hf_features(frames)
        self.schema: pa.Schema = self.features.arrow_schema
        self.names: list[str] = list(self.features)
        self.rows: list[dict] = []
        self.bytes = 0
        self.writer: Any = None  # a pyarrow ParquetWriter while a shard is open
        self.shards: list[Path] = []
        self.arrow_bytes = 0  # what the split takes in memory, for the card's num_bytes

    def add(self, rec: dict, image: bytes, prev: bytes | None, side: dict[str, bytes]) -> None:
        self.rows.append(hf_row(rec, image, prev, self.names))
        self.bytes += len(image) + len(prev or b"") + 600
        if len(self.rows) >= ROWS_PER_GROUP:
            self._flush()
        if self.bytes >= self.shard_size:
            self._close_shard()

    def _flush(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.rows:
            return
        if self.writer is None:
            path = self.folder / f".{self.split}-{len(self.shards):05d}.parquet.tmp"
            self.shards.append(path)
            # statistics on game and episode only: readers can skip row groups by them
            with writing(path):
                self.writer = pq.ParquetWriter(path, self.schema, compression="zstd", write_statistics=STATISTICS)
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        self.arrow_bytes += table.nbytes
        with writing(self.shards[-1]):  # pyarrow's OSError names no file
            self.writer.write_table(table)
        self.rows = []

    def _close_shard(self) -> None:
        self._flush()
        if self.writer is not None:
            with writing(self.shards[-1]):
                self.writer.close()
            self.writer = None
        self.bytes = 0

    def close(self) -> list[Path]:
        self._close_shard()
        n = len(self.shards)
        out = []
        for i, tmp in enumerate(self.shards):
            final = self.root / repo.parquet_file(self.source, self.game, self.split, i, n)
            os.replace(tmp, final)
            out.append(final)
        return out


class _TarShards:
    """One game's split as WebDataset shards (:mod:`atari_data.publish.tar`: plain ustar members with
    fixed metadata), a new shard once one reaches ``shard_size`` bytes, opened at the first sample
    so an empty split writes no file."""

    def __init__(self, root: Path, source: str, game: str, split: str, shard_size: int):
        self.pattern = str(root / repo.tar_dir(source, game) / f"{split}-%06d.tar")
        self.shard_size = shard_size
        self.writer: TarWriter | None = None
        self.paths: list[Path] = []

    def add(self, rec: dict, image: bytes, prev: bytes | None, side: dict[str, bytes]) -> None:
        if self.writer is not None and self.writer.size >= self.shard_size:
            self.writer.close()
            self.writer = None
        if self.writer is None:
            self.paths.append(Path(self.pattern % len(self.paths)))
            self.paths[-1].parent.mkdir(parents=True, exist_ok=True)
            self.writer = TarWriter(self.paths[-1])
        body = {k: v for k, v in rec.items() if k not in FRAME_FIELDS}
        for name in JSON_TEXT & body.keys():  # mappings as text, as in Parquet: keys never vary
            body[name] = encode_json(body[name])
        members = {
            repo.RECORD_EXT: encode_json(body).encode(),
            repo.frame_ext(rec["image"]): image,
            **side,
        }
        if prev is not None:
            members[repo.frame_ext(rec["prev_image"], repo.PREV)] = prev
        for ext in sorted(members):  # in name order, as webdataset's own writer puts them
            self.writer.add(f"{rec['id']}.{ext}", members[ext])

    def close(self) -> list[Path]:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
        return self.paths


def pack(cfg: PackConfig) -> dict:
    """Pack and return a summary: configs, splits, records, shards and files."""
    from atari_data.layout.validate import validate

    unknown = set(cfg.formats) - {"parquet", "webdataset"}
    if unknown or "parquet" not in cfg.formats:
        raise AtariDataError(
            f"formats {sorted(cfg.formats)}: parquet is required (load_dataset reads it), webdataset is optional",
            field="--formats",
        )
    if cfg.png_level is not None and cfg.png_level not in LEVELS:
        raise AtariDataError(f"{cfg.png_level} is not a libdeflate level 1-12 (or keep)", field="--png-level")
    if cfg.threads is not None and (type(cfg.threads) is not int or not 1 <= cfg.threads <= MAX_THREADS):
        raise AtariDataError(f"{cfg.threads!r} is not a thread count 1-{MAX_THREADS}", field="--threads")
    if cfg.repo is not None and (problem := repo.hub_id_problem(cfg.repo)):
        raise AtariDataError(problem, field="--repo")
    games = list_games(cfg.root, cfg.sources, cfg.games, follow=False)
    if not games:
        raise AtariDataError("has no ready games to pack", file=str(cfg.root), field="root")
    before = _fingerprints(games)  # before anything is read: a game replaced from now on is caught
    report = validate(cfg.root, cfg.sources, cfg.games)
    if not report.ok:
        _unchanged(before)  # a game replaced meanwhile is named as that, not as its defects
        raise AtariDataError(
            f"{len(report.defects)} defects, e.g. {report.defects[0].render()}; run `atari-data validate` first",
            file=str(cfg.root),
            field="root",
        )
    out = Path(cfg.out)
    repo.check_target(Path(cfg.root), out, cfg.force)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # a file where a folder above OUT should be
        raise AtariDataError("lies under a file, not a folder", file=str(out), field="OUT") from None
    lock = OutputLock(out, str(out))  # one pack into OUT at a time
    try:
        repo.check_target(Path(cfg.root), out, cfg.force)  # again, held: one that ended meanwhile made OUT
        return _pack(cfg, games, out, before)
    finally:
        lock.release()


def _fingerprints(games: list[GameDir]) -> dict[Path, tuple]:
    """Each game folder pinned as it stands (:meth:`GameDir.pin`) and its meta.json's bytes."""
    try:
        return {g.path: (g.pin(), read_file(g.path / META)) for g in games}
    except OSError as e:  # a game mid-swap, between generate's two renames
        raise AtariDataError(
            f"is being replaced ({e.strerror}); pack once that has finished", file=str(e.filename)
        ) from None


def _unchanged(before: dict[Path, tuple]) -> None:
    for path, (pin, meta) in before.items():
        try:
            same = pin.same() and read_file(path / META) == meta
        except (AtariDataError, OSError):  # a game gone mid-swap
            same = False
        if not same:
            raise pin.replaced("packed", "pack it")


def _pack(cfg: PackConfig, games: list[GameDir], out: Path, before: dict[Path, tuple]) -> dict:
    from atari_data.publish.card import write_card

    tmp = out.with_name(f".{out.name}.partial")
    _clear_beside(tmp)
    _clear_beside(set_aside(out), keep=True)  # swap_into_place removes it at the swap
    try:  # a refused or interrupted pack leaves no staging folder behind
        by_source: dict[str, list[GameDir]] = {}
        for g in games:
            by_source.setdefault(g.source, []).append(g)

        summary: dict = {"configs": {}}
        metas: dict[str, dict[str, dict]] = {}
        if cfg.replay:
            from atari_data.publish.card import write_replay_card
            from atari_data.publish.replay import write_replay_game

            for source, gs in sorted(by_source.items()):
                counts = {g.game: write_replay_game(g, tmp / repo.REPLAY / source / g.game) for g in gs}
                summary["configs"][source] = {"replay": counts}
                metas[source] = {g.game: g.meta() for g in gs}
            write_replay_card(tmp / repo.CARD, cfg.name, summary, metas)
            _unchanged(before)
            return _finish(tmp, out, summary, cfg)
        for source, gs in sorted(by_source.items()):
            metas[source] = {g.game: g.meta() for g in gs}
            frames = {m["frames"] for m in metas[source].values()}
            if len(frames) != 1:
                raise AtariDataError(f"games of source {source} mix one- and two-frame records", field="frames")
            frames = frames.pop()
            for g in gs:
                (tmp / repo.meta_file(source, g.game)).parent.mkdir(parents=True, exist_ok=True)
                copy_plain(g.path / META, tmp / repo.meta_file(source, g.game))
            conf: dict = {
                "frames": frames,
                "splits": {
                    hf: {"records": 0, "bytes": 0, "side_images": 0, "parquet": [], "webdataset": []}
                    for hf in HUB_SPLITS.values()
                },
                "games": {},
            }
            for g in gs:
                per_game = conf["games"][g.game] = {}
                for split, hf_split in HUB_SPLITS.items():
                    parquet = _ParquetShards(tmp, source, g.game, hf_split, frames, cfg.shard_size)
                    writers: list[_ParquetShards | _TarShards] = [parquet]
                    if "webdataset" in cfg.formats:
                        writers.append(_TarShards(tmp, source, g.game, hf_split, cfg.shard_size))
                    n, side = 0, 0
                    try:
                        for row in layout_rows([g], split, cfg.png_level, cfg.threads):
                            if row[3] and "webdataset" not in cfg.formats:  # refuse at the first, not after
                                raise AtariDataError(
                                    f"{source} has side images (e.g. masks, record {row[0]['id']}) that only "
                                    "the WebDataset shards carry; pack with webdataset in --formats",
                                    field="--formats",
                                )
                            for w in writers:
                                w.add(*row)
                            n, side = n + 1, side + len(row[3])
                    except BaseException:
                        for w in writers:  # close their open files before the staging folder goes
                            with contextlib.suppress(Exception):
                                w.close()
                        raise
                    shards = [w.close() for w in writers]
                    per_game[hf_split] = {"records": n, "bytes": parquet.arrow_bytes}
                    total = conf["splits"][hf_split]
                    total["records"] += n
                    total["bytes"] += parquet.arrow_bytes
                    total["side_images"] += side
                    total["parquet"] += [str(p.relative_to(tmp)) for p in shards[0]]
                    total["webdataset"] += [str(p.relative_to(tmp)) for p in shards[1]] if len(shards) > 1 else []
            summary["configs"][source] = conf
        (tmp / repo.SCHEMA).mkdir()
        for kind in repo.SCHEMA_KINDS:
            write_file(tmp / repo.schema_file(kind), json.dumps(json_schema(kind), indent=2) + "\n")
        write_card(tmp / repo.CARD, cfg.name, summary, metas, cfg.repo)
        _unchanged(before)
        return _finish(tmp, out, summary, cfg)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (AtariDataError, OSError)):
            _unchanged(before)  # a frame gone mid-swap is the game replaced, not a defect of it
        raise


#: What a pack writes at its top level: a folder beside OUT holding anything else is not a pack's.
PACK_PARTS = {repo.CARD, repo.DATA, repo.WEBDATASET, repo.META, repo.SCHEMA, repo.REPLAY}


def _clear_beside(path: Path, keep: bool = False) -> None:
    """OUT's staging or set-aside name, as a stopped pack left it, cleared for this one: a link or a
    file goes itself, a folder only when it holds nothing a pack would not write (a user's folder of
    that name was deleted, even the layout being packed); with ``keep`` such a folder stays (the
    previous pack that a kill between the swap's two renames left there, until the new one is in)."""
    if path.is_dir() and not path.is_symlink():
        stray = sorted(set(os.listdir(path)) - PACK_PARTS)
        if stray:
            raise AtariDataError(
                f"is not a pack's own folder (it holds {stray[0]}); pack uses this name beside OUT: move it",
                file=str(path),
                field="OUT",
            )
        if not keep:
            shutil.rmtree(path)
    else:
        remove(path)


def _finish(tmp: Path, out: Path, summary: dict, cfg: PackConfig) -> dict:
    _check_hub_limits(tmp)
    swap_into_place(tmp, out)
    summary["schema_version"] = SCHEMA_VERSION
    cfg.summary = summary
    return summary


def _check_hub_limits(folder: Path) -> None:
    for path, _, msg in repo.hub_limit_defects(folder)[:1]:
        raise AtariDataError(
            f"{msg}; use a larger --shard-size" if "files" in msg else msg, file=str(path), field="--shard-size"
        )
