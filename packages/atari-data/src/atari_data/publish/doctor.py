"""`atari-data doctor`: check a packed repository against its contract (:mod:`atari_data.publish.repo`)
and its card: every config and split loads with ``load_dataset``, counts agree with meta.json and
the card, every row is a record the schema and its game's meta.json accept, shards hold only
well-named plain members and read through the shard helper, frames decode (only as PNG or JPEG,
within the frame limit), replay-packed games pass rebuild's checks, sizes fit the Hub. A repository
of Melting Pot clips is checked by :mod:`atari_data.meltingpot.doctor`.
"""

from __future__ import annotations

import hashlib
import io
import json
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.layout import PACK_SWAPPER, FolderPin, leaves_folder, read_json, split_file_name
from atari_data.layout.png import decode_png, expected_frame, formats_of, is_intact, pillow_frame
from atari_data.layout.records import GameRules, image_name
from atari_data.layout.validate import REPEATED, repeated_key
from atari_data.publish import repo
from atari_data.publish.card import checked_rows, data_files, read_card
from atari_data.publish.replay import read_replay_game
from atari_data.publish.shards import records, shape_text
from atari_data.publish.tar import members
from atari_data.publish.teardown import own_cache, streaming, without_torch
from atari_data.schema import (
    FRAME_FIELDS,
    GAME_RE,
    ID_RE,
    JSON_TEXT,
    KNOWN_VERSIONS,
    META,
    RECORD,
    SOURCE_RE,
    check_structure,
    encode_json,
    frame_size,
)
from laya_protocol.errors import cause
from laya_protocol.names import HUB_SPLITS, SPLITS


@dataclass
class Doctor:
    folder: Path
    defects: list[AtariDataError] = field(default_factory=list)
    counts: dict = field(default_factory=dict)
    _meta_cache: dict = field(default_factory=dict)
    _rules_cache: dict = field(default_factory=dict)
    _ids: dict = field(default_factory=dict)  # (source, split) -> {id: digest of its Parquet row}
    _cache: str = field(default="", init=False)  # the datasets cache folder of this run (run sets it)

    def defect(self, file, fld: str, msg: str) -> None:
        self.defects.append(AtariDataError(msg, file=str(file), field=fld))

    def run(self) -> Doctor:
        """Check the folder; one that a pack --force replaced meanwhile is said to be so, not judged:
        what was read may be two packs' (a healthy one was called broken)."""
        pin = FolderPin(self.folder) if self.folder.is_dir() and not self.folder.is_symlink() else None
        try:
            # datasets' lock files out of a user's cache it may not use; torch, which datasets and
            # webdataset import where it is installed, left unimported: rows are checked, never trained on
            with own_cache() as self._cache, without_torch():
                self._examine()
            if pin is not None and not pin.same():
                self.defects = [pin.replaced("checked", "run doctor", PACK_SWAPPER)]
        finally:
            if pin is not None:
                pin.close()
        return self

    def _examine(self) -> None:
        try:
            card = read_card(self.folder)
        except AtariDataError as e:
            self.defects.append(e)
            return
        if card.get("lmdb_pack"):  # re-sharded LMDB clips (atari-data pack-lmdb): not records
            from atari_data.meltingpot.doctor import check_lmdb_pack

            check_lmdb_pack(self, card["lmdb_pack"].get("games") or {})
            for path, fld, msg in repo.unexpected(self.folder, local=False):  # as for record packs
                self.defect(path, fld, msg)
            self._limits()
            return
        version = card.get("schema_version")
        if version not in KNOWN_VERSIONS:
            self.defect(
                self.folder / repo.CARD,
                "schema_version",
                f"{version!r} is not a known schema version ({', '.join(map(str, KNOWN_VERSIONS))})",
            )
        if card.get("replay"):
            self._replay(card["replay"])
        # Named first: datasets reads more of a folder than its configs' files (a legacy
        # dataset_infos.json's features among them: one declaring provenance an image had it open the
        # path a row holds), so a folder holding anything the contract does not name is not loaded.
        strays = repo.unexpected(self.folder, local=False)  # what publish would refuse to upload
        for path, fld, msg in strays:
            self.defect(path, fld, msg)
        claimed: set[Path] = set()
        infos = {i.get("config_name"): i for i in card.get("dataset_info") or []}
        files = {name: set(matched) for name, matched in data_files(self.folder, card).items()}
        costly: set[Path] = set()  # files refused before datasets could read them
        for conf in card.get("configs") or []:
            name = conf.get("config_name")
            for df in conf.get("data_files", []):
                if not any(self.folder.glob(df["path"])):
                    self.defect(
                        self.folder / repo.CARD, f"configs.{name}.{df['split']}", f"{df['path']} matches no file"
                    )
            for path in sorted(files[name] - claimed):  # each file once, before datasets expands it whole
                try:
                    checked_rows(path)
                except AtariDataError as e:
                    self.defects.append(e)
                    costly.add(path)
            claimed.update(files[name])
            if files[name] & costly or strays:
                continue
            with _quiet_datasets():  # a file that does not load is one defect line, not datasets' log too
                self._config(name, conf, infos.get(name, {}))
        for name, held in files.items():  # a game config is only counted: its frames are its source's
            source, game = repo.split_config(name)
            outside = sorted(held - files.get(source, set())) if game is not None else []
            if outside:
                self.defect(
                    outside[0],
                    f"configs.{name}",
                    f"is not among the files of config {source!r} (a game config reads a subset of its source's)",
                )
        named = {path for path, _, _ in strays}
        for p in sorted((self.folder / repo.DATA).rglob("*")) if (self.folder / repo.DATA).exists() else []:
            if p.is_file() and p not in claimed and p not in named:
                self.defect(p, "(file)", "belongs to no config in the card")
        self._orphan_metas()
        self._limits()

    def _orphan_metas(self) -> None:
        """A meta.json of a game the repository holds no shards or replay files of describes nothing."""
        held = {
            p.parent.relative_to(self.folder / top).parts
            for top in (repo.DATA, repo.WEBDATASET, repo.REPLAY)
            for p in (self.folder / top).glob("*/*/*")
            if p.is_file()
        }
        for meta in sorted((self.folder / repo.META).glob("*/*.json")):
            if (meta.parent.name, meta.stem) not in held:
                self.defect(meta, "(file)", "is the meta.json of a game with no shards or replay files here")

    def _metas(self, source: str) -> dict[str, dict]:
        if source not in self._meta_cache:
            metas = {}
            for f in sorted((self.folder / repo.meta_dir(source)).glob("*.json")):
                try:
                    metas[f.stem] = read_json(f)
                except AtariDataError as e:
                    self.defects.append(e)
            self._meta_cache[source] = metas
        return self._meta_cache[source]

    def _config(self, name: str, conf: dict, info: dict) -> None:
        """A source config is read whole, every frame decoded; a game config ``<source>-<Game>`` is
        counted (its files are a subset of its source's, already decoded) and must hold only that game."""
        from datasets import load_dataset

        source, game = repo.split_config(name)
        metas = self._metas(source)
        if game is not None:
            metas = {game: metas[game]} if game in metas else {}
            if not metas:
                self.defect(self.folder / repo.CARD, f"configs.{name}", f"no {repo.meta_file(source, game)} for it")
                return
        expected_by_split = {
            hub: sum(m.get(split, {}).get("records", 0) for m in metas.values()) for split, hub in HUB_SPLITS.items()
        }
        stated = {s.get("name"): s.get("num_examples") for s in info.get("splits", [])}
        for df in conf.get("data_files", []):
            split = df["split"]
            # Streamed: the split's own files as they are on disk now, never a cache of an older build.
            n = 0
            try:
                streaming()  # the command's end frees the readers (publish.teardown)
                rows = load_dataset(str(self.folder), name, split=split, streaming=True, cache_dir=self._cache)
                columns = list(rows.features or {})
                if set(columns) - set(RECORD.names) or {"id", "image", "label"} - set(columns):
                    self.defect(self.folder / df["path"], "columns", f"{columns} are not the schema's fields")
                if game is not None:
                    for row in rows.select_columns(["game"]):
                        if row["game"] != game:
                            raise ValueError(f"row {n} is of {row['game']}")
                        n += 1
                else:
                    from datasets import Image as HFImage

                    for key in FRAME_FIELDS & set(columns):  # frames as bytes: decoded here, within the limits
                        rows = rows.cast_column(key, HFImage(decode=False))
                    where = self.folder / df["path"]
                    ids = self._ids.setdefault((source, split), {})
                    for row in tqdm(rows, desc=f"doctor {name}/{split}", unit=" rows", disable=None, leave=False):
                        ids[row.get("id")] = self._row(where, row, source, metas)
                        n += 1
            except Exception as e:  # noqa: BLE001 - whatever `datasets` raises, it is a defect of the repo
                where = f"configs.{name}.{split}"
                self.defect(self.folder / repo.CARD, where, f"does not load after {n} rows ({cause(e)})")
                continue
            self.counts[f"{name}/{split}"] = n
            if n != expected_by_split.get(split):
                self.defect(
                    self.folder / (repo.meta_dir(source) if game is None else repo.meta_file(source, game)),
                    f"{split}.records",
                    f"meta.json files say {expected_by_split.get(split)}, the data has {n}",
                )
            if split in stated and stated[split] != n:
                self.defect(
                    self.folder / repo.CARD,
                    f"dataset_info.{name}.{split}",
                    f"says {stated[split]} examples, the data has {n}",
                )
            if game is None:
                self._tars(source, split, n)

    def _row(self, where: Path, row: dict, source: str, metas: dict[str, dict]) -> bytes | None:
        """One Parquet row read as a consumer reads it: its frames decoded (only as PNG or JPEG, within
        the frame limit, the previous frame the image's shape), its JSON text parsed, and the record
        checked against the schema and its game's rules, as validate checks a layout's records.
        Returns the digest of the record and its pixels (None when it has a defect), which the same
        id's WebDataset sample must have."""
        before = len(self.defects)
        rid = row.get("id")
        rec = {k: v for k, v in row.items() if v is not None and k not in FRAME_FIELDS}
        frames = {}
        for key in FRAME_FIELDS:
            cell = row.get(key)
            if cell is None:
                continue
            data = (cell if isinstance(cell, dict) else {}).get("bytes") or b""
            try:
                frames[key] = decode_png(data)
            except ValueError as e:
                self.defect(where, f"{rid}: {key}", str(e))
            else:  # ours reads it; datasets reads it with Pillow: whole, and of the game's frame format
                self._as_pillow_reads(where, f"{rid}: {key}", data, rec.get("game"), metas)
            rec[key] = image_name(str(rid), ".png", "prev" if key == "prev_image" else "")
        image, prev = frames.get("image"), frames.get("prev_image")
        if image is not None and prev is not None and prev.shape != image.shape:
            self.defect(where, f"{rid}: prev_image", f"is {shape_text(prev)}, the image is {shape_text(image)}")
        for key in JSON_TEXT & rec.keys():
            text = rec[key]
            try:
                rec[key] = json.loads(text) if isinstance(text, str) else text
            except (ValueError, RecursionError) as e:
                self.defect(where, f"{rid}: {key}", f"is not valid JSON ({str(e)[:120]})")
                return None
            # pack writes canonical text (encode_json): only other text is parsed again for repeated keys
            canonical = not isinstance(text, str) or encode_json(rec[key]) == text
            if not canonical and (twice := repeated_key(text.encode("utf-8", "surrogatepass"))):
                self.defect(where, f"{rid}: {key}.{twice}", REPEATED)
        rules = self._rules(source, rec.get("game"), metas)
        if rules is None:
            self.defect(where, f"{rid}: game", f"{rec.get('game')!r} has no usable meta.json (actions, frames)")
            return None
        for fld, msg in rules.check(rec):
            self.defect(where, f"{rid}: {fld}", msg)
        return record_digest({**rec, **frames}) if len(self.defects) == before else None

    def _as_pillow_reads(self, where: Path, fld: str, data: bytes, game, metas: dict[str, dict]) -> None:
        try:
            if not is_intact(data):
                raise ValueError("is not an intact PNG or JPEG")
            im = pillow_frame(data)
        except ValueError as e:
            self.defect(where, fld, f"{e} (as datasets reads it, with Pillow)")
            return
        meta = metas.get(game) if isinstance(game, str) else None
        want = frame_size(meta.get("frame_format")) if isinstance(meta, dict) else None
        if want is not None and (im.mode, im.size) != want:
            self.defect(where, fld, f"is {im.mode} {im.size[1]}x{im.size[0]}, {expected_frame(want)}")

    def _rules(self, source: str, game, metas: dict[str, dict]) -> GameRules | None:
        key = (source, game if isinstance(game, str) else None)
        if key not in self._rules_cache:
            meta = metas.get(game) if isinstance(game, str) else None
            rules = None
            if isinstance(meta, dict) and not check_structure(meta, META):
                try:
                    rules = GameRules(source, game, tuple(meta["actions"]), meta["frames"], meta["platform"])
                except (AtariDataError, KeyError, ValueError):
                    rules = None
            self._rules_cache[key] = rules
        return self._rules_cache[key]

    def _tars(self, source: str, split: str, n_rows: int) -> None:
        tars = sorted(self.folder.glob(repo.tar_pattern(source, split)))
        if not tars:
            return
        samples, shard_of = 0, dict[str, Path]()  # every sample's shard: a sample in two shards is read twice
        for t in tars:
            before = len(self.defects)
            try:
                with limits.open_regular(t) as raw:  # our walker: tarfile read a pax header whole, on a quadratic regex
                    keys: dict[str, set] = {}
                    for name, data in members(
                        io.BufferedReader(raw), str(t), "frame", files_only=True
                    ):  # none read past it
                        if leaves_folder(name) or "/" in name:
                            self.defect(t, name, "is not a plain file at the top of the shard (path traversal?)")
                            continue
                        key, ext = repo.split_member(name)
                        role = repo.member_role(ext)
                        if not ID_RE.match(key) or role is None:
                            self.defect(
                                t,
                                name,
                                "is a stray member (expected <id>.json, <id>.png, <id>.prev.png, <id>.<name>.png)",
                            )
                            continue
                        if role != "record" and not is_intact(data, None, formats_of(name)):  # as its name says
                            self.defect(t, name, "is not an intact PNG or JPEG frame")
                        keys.setdefault(key, set()).add(role)
                    for key, roles in keys.items():
                        if not {"record", "frame"} <= roles:
                            self.defect(t, key, f"has {sorted(roles)}; a sample needs its record and its frame")
                        if key in shard_of:
                            self.defect(t, key, f"is also in {shard_of[key].name} (read twice)")
                        shard_of.setdefault(key, t)
                    samples += len(keys)
            except (OSError, EOFError, zlib.error) as e:
                self.defect(t, "(file)", f"is not a readable tar ({e})")
            except AtariDataError as e:
                self.defects.append(e)
            if len(self.defects) == before:  # names and frames fine: read it as the shard helper does
                digests = self._ids.get((source, split), {})
                try:
                    for rec in records([str(t)], split=False):  # and each sample is its Parquet row
                        want = digests.get(rec["id"])
                        if want is not None and record_digest(rec) != want:
                            self._differs(t, source, rec)
                except AtariDataError as e:
                    self.defects.append(e)
        if samples != n_rows:
            self.defect(
                self.folder / repo.WEBDATASET / source, split, f"{samples} samples, the parquet split has {n_rows}"
            )
        rows = self._ids.get((source, split), {}).keys()
        for what, ids in (
            ("not in the parquet split", shard_of.keys() - rows),
            ("in no shard", rows - shard_of.keys()),
        ):
            if ids:
                first = sorted(ids, key=str)[0]
                self.defect(self.folder / repo.WEBDATASET / source, split, f"{len(ids)} ids {what}, e.g. {first}")

    def _differs(self, shard: Path, source: str, rec: dict) -> None:
        """A sample that is not its Parquet row: its own defects as a record, or else that it differs."""
        rid = rec["id"]
        plain = {k: v for k, v in rec.items() if not k.startswith("__")}
        for key in FRAME_FIELDS & plain.keys():
            plain[key] = image_name(str(rid), ".png", "prev" if key == "prev_image" else "")
        rules = self._rules(source, plain.get("game"), self._metas(source))
        problems = rules.check(plain) if rules is not None else [("game", f"{plain.get('game')!r} has no meta.json")]
        for fld, msg in problems:
            self.defect(shard, f"{rid}: {fld}", msg)
        if not problems:
            self.defect(shard, rid, "is not the record of its Parquet row (the same id): fields or pixels differ")

    def _replay(self, listing: dict) -> None:
        base = self.folder / repo.REPLAY
        for source, games in listing.items():
            if not (
                isinstance(source, str)
                and SOURCE_RE.match(source)
                and isinstance(games, (list, dict))
                and all(isinstance(g, str) and GAME_RE.match(g) for g in games)
            ):
                self.defect(self.folder / repo.CARD, f"replay.{source}", "is not a source with a list of games")
                continue
            for game in games:
                d = base / source / game
                try:  # what rebuild checks before it plays; only playing checks the frames' MD5s
                    packed = read_replay_game(d, source, game)
                except AtariDataError as e:
                    self.defects.append(e)
                    continue
                for split in SPLITS:
                    n, stated = len(packed.rows[split]), packed.meta[split]["records"]
                    self.counts[f"replay/{source}/{game}/{split}"] = n
                    if n != stated:
                        self.defect(d / split_file_name(split), "records", f"{n} lines, meta.json says {stated}")

    def _limits(self) -> None:
        for path, fld, msg in repo.hub_limit_defects(self.folder):
            self.defect(path, fld, msg)


@contextmanager
def _quiet_datasets():
    from datasets.utils import logging as datasets_logging

    level = datasets_logging.get_verbosity()
    datasets_logging.set_verbosity(datasets_logging.CRITICAL)
    try:
        yield
    finally:
        datasets_logging.set_verbosity(level)


def record_digest(rec: dict) -> bytes:
    """A record as a reader gets it (JSON text parsed, frames decoded), fields and pixels, in 16 bytes:
    what a Parquet row and the WebDataset sample of its id must share."""
    h = hashlib.blake2b(digest_size=16)
    fields = {k: v for k, v in rec.items() if v is not None and k not in FRAME_FIELDS and not k.startswith("__")}
    h.update(encode_json(fields).encode())  # webdataset's __key__ and __url__ aside
    for key in sorted(FRAME_FIELDS):
        pixels = rec.get(key)
        if pixels is not None:
            h.update(f"{key}{pixels.shape}{pixels.dtype}".encode())
            h.update(np.ascontiguousarray(pixels).data)
    return h.digest()
