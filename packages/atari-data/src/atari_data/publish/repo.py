"""The packed repository's contract: where each file lives, how shard members are named, and the
Hub's limits. ``pack`` writes to it, ``doctor`` checks against it, the card describes it, and the
shard reader and laya-policy's loader read by it.

    OUT/
      README.md                                         the dataset card (YAML configs and features)
      data/<config>/<split>-NNNNN-of-NNNNN.parquet      what load_dataset reads
      webdataset/<config>/<split>-NNNNNN.tar            the same rows as WebDataset samples
      meta/<config>/<Game>.json                         every game's meta.json, verbatim
      schema/<kind>.schema.json                         the frozen schema (record, meta)
      replay/<config>/<Game>/...                        replay-packed games instead of frames

``<config>`` is the source, ``<split>`` the Hub's split name (``laya_protocol.names.HUB_SPLITS``).
A WebDataset sample is the members sharing one key, named by webdataset's rule: the key is a
member's name up to its first dot, the extension everything after it. The key is the record id
(which has no dot); extensions are ``json`` (the record without its image paths), ``png`` or
``jpg`` (the frame), ``prev.png`` (the previous frame) and ``<name>.png`` for each side image the
record's provenance references (e.g. ``mask.png``).
"""

from __future__ import annotations

import re
from pathlib import Path

CARD = "README.md"
DATA, WEBDATASET, META, SCHEMA, REPLAY = "data", "webdataset", "meta", "schema", "replay"
SCHEMA_KINDS = ("record", "meta")

#: Limits of the Hub (its documented repository recommendations).
MAX_FILES = 100_000
MAX_FILES_PER_FOLDER = 10_000
MAX_FILE_BYTES = 5_000_000_000

#: A folder name that stays inside the repository.
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")

RECORD_EXT = "json"
FRAME_EXTS = ("png", "jpg")
PREV = "prev"


def parquet_file(config: str, split: str, i: int, n: int) -> str:
    return f"{DATA}/{config}/{split}-{i:05d}-of-{n:05d}.parquet"


def parquet_pattern(config: str, split: str) -> str:
    """The card's ``data_files`` glob of one split."""
    return f"{DATA}/{config}/{split}-*.parquet"


def tar_dir(config: str) -> str:
    return f"{WEBDATASET}/{config}"


def tar_file(config: str, split: str, i: int) -> str:
    return f"{tar_dir(config)}/{split}-{i:06d}.tar"


def tar_pattern(config: str, split: str) -> str:
    return f"{tar_dir(config)}/{split}-*.tar"


def tar_urls(config: str, split: str, n: int) -> str:
    """The brace pattern that names a split's ``n`` shards, as webdataset expands it."""
    return f"{tar_dir(config)}/{split}-{{{0:06d}..{n - 1:06d}}}.tar"


def meta_dir(config: str) -> str:
    return f"{META}/{config}"


def meta_file(config: str, game: str) -> str:
    return f"{meta_dir(config)}/{game}.json"


def schema_file(kind: str) -> str:
    return f"{SCHEMA}/{kind}.schema.json"


def member(key: str, ext: str) -> str:
    return f"{key}.{ext}"


def split_member(name: str) -> tuple[str, str]:
    """(key, extension) of a member name, by webdataset's rule (the first dot splits them)."""
    key, _, ext = name.partition(".")
    return key, ext


_SIDE_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def member_role(ext: str) -> str | None:
    """What a member with extension ``ext`` is in a sample: ``record``, ``frame``, ``prev`` (the
    previous frame), ``side`` (a side image such as ``mask.png``), or None for no member of ours."""
    if ext == RECORD_EXT:
        return "record"
    if ext in FRAME_EXTS:
        return "frame"
    name, _, suffix = ext.rpartition(".")
    if suffix not in FRAME_EXTS:
        return None
    if name == PREV:
        return "prev"
    return "side" if _SIDE_NAME.match(name) else None


def frame_ext(path: str, role: str | None = None) -> str:
    """The member extension of a frame stored at ``path``: ``png``, ``prev.png``, ``mask.png``..."""
    suffix = Path(path).suffix.lstrip(".")
    return f"{role}.{suffix}" if role else suffix


def is_packed(folder: Path) -> bool:
    """A folder laid out as above (a card with data or replay files)."""
    return (folder / CARD).is_file() and ((folder / DATA).is_dir() or (folder / REPLAY).is_dir())


def unexpected(folder: Path) -> list[tuple[Path, str, str]]:
    """Whatever in ``folder`` this contract does not describe: symlinks anywhere (a link would upload
    what it points to), and top-level entries other than the card and the folders above."""
    out = []
    known = {CARD, DATA, WEBDATASET, META, SCHEMA, REPLAY}
    for p in sorted(folder.rglob("*")):
        if p.is_symlink():
            out.append((p, "(file)", "is a symlink"))
        elif p.parent == folder and p.name not in known:
            out.append((p, "(file)", f"is not part of a packed repository ({', '.join(sorted(known))})"))
    return out


def hub_limit_defects(folder: Path) -> list[tuple[Path, str, str]]:
    """Every way ``folder`` breaks the Hub's limits, as (path, field, message)."""
    files = [p for p in folder.rglob("*") if p.is_file()]
    out = []
    if len(files) > MAX_FILES:
        out.append((folder, "(files)", f"{len(files):,} files, over the Hub's {MAX_FILES:,}"))
    per: dict[Path, int] = {}
    for p in files:
        per[p.parent] = per.get(p.parent, 0) + 1
        if p.stat().st_size > MAX_FILE_BYTES:
            out.append((p, "(size)", f"{p.stat().st_size:,} bytes, over the Hub's {MAX_FILE_BYTES:,} per file"))
    out += [
        (d, "(files)", f"{n:,} files in one folder, over the Hub's {MAX_FILES_PER_FOLDER:,}")
        for d, n in per.items()
        if n > MAX_FILES_PER_FOLDER
    ]
    return out
