"""The packed repository's contract: where each file lives, how shard members are named, and the
Hub's limits. ``pack`` writes to it, ``doctor`` checks against it, the card describes it, and the
shard reader and laya-policy's loader read by it.

    OUT/
      README.md                                                the dataset card (YAML configs and features)
      data/<source>/<Game>/<split>-NNNNN-of-NNNNN.parquet      what load_dataset reads
      webdataset/<source>/<Game>/<split>-NNNNNN.tar            the same rows as WebDataset samples
      meta/<source>/<Game>.json                                every game's meta.json, verbatim
      schema/<kind>.schema.json                                the frozen schema (record, meta)
      replay/<source>/<Game>/...                               replay-packed games instead of frames

Shards are per (source, game, split), so one game is one folder to download. The card declares two
kinds of config over the same files: ``<source>`` (every game of the source) and ``<source>-<Game>``
(one game; :func:`game_config`). ``<split>`` is the Hub's split name (``laya_protocol.names.HUB_SPLITS``).
A WebDataset sample is the members sharing one key, named by webdataset's rule: the key is a
member's name up to its first dot, the extension everything after it. The key is the record id
(which has no dot); extensions are ``json`` (the record without its image paths), ``png`` or
``jpg`` (the frame), ``prev.png`` (the previous frame) and ``<name>.png`` for each side image the
record's provenance references (e.g. ``mask.png``).
"""

from __future__ import annotations

import re
from pathlib import Path

from atari_data.schema import GAME_RE, IMAGE_SUFFIXES, SOURCE_RE, image_suffix
from laya_protocol.names import HUB_SPLITS, SPLITS

CARD = "README.md"
#: Files that datasets reads beside a folder's card when it loads the folder: a standalone YAML that
#: replaces the card's configs, and legacy features per config. A packed repository has neither.
BESIDE_CARD = (".huggingface.yaml", "dataset_infos.json")
DATA, WEBDATASET, META, SCHEMA, REPLAY = "data", "webdataset", "meta", "schema", "replay"
FOLDERS = (DATA, WEBDATASET, META, SCHEMA, REPLAY)  # what publish may add to or remove from on the Hub
SCHEMA_KINDS = ("record", "meta")

#: Limits of the Hub (its documented repository recommendations).
MAX_FILES = 100_000
MAX_FILES_PER_FOLDER = 10_000
MAX_FILE_BYTES = 5_000_000_000

_HUB_ID = r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*"
#: A Hub repository id, ORG/NAME (what the card's examples may name).
HUB_ID_RE = re.compile(_HUB_ID + r"\Z")
#: A Hub repository as a command line names one to read: ORG/NAME[@REVISION] (a branch, tag or
#: commit); group 1 is the id, group 2 the revision or None.
HUB_REF_RE = re.compile(rf"({_HUB_ID})(?:@([\w./-]+))?\Z")


def hub_id_problem(repo: str) -> str | None:
    """Why ``repo`` is no Hub repository id to make or push to, or None: ORG/NAME in plain characters,
    and the Hub's own rule (huggingface_hub's ``validate_repo_id``: no '--' or '..', no '.git' at the
    end, at most 96 characters), checked before any repository is made. One rule for publish, pack's
    card and laya-policy push."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not HUB_ID_RE.match(repo):
        return f"{repo!r} is not a Hub id ORG/NAME (letters, digits and '_.-')"
    try:
        validate_repo_id(repo)
    except HFValidationError:
        return f"{repo!r} is a name the Hub refuses (no '--' or '..', no '.git' at the end, at most 96 characters)"
    return None


#: A branch name publish and laya-policy push may commit to (``--revision``): plain parts joined by
#: ``/``, narrower than git's rules for a ref name (no ``..``, no part starting with a dot or ending in
#: ``.`` or ``.lock``, not ``HEAD``, not a full ``refs/`` name, not 40 hex digits, which read as a
#: commit). BRANCH_RULE says it in words.
BRANCH_RE = re.compile(
    r"(?!refs/)(?!HEAD\Z)(?![0-9a-fA-F]{40}\Z)(?!.*\.\.)(?!.*\.lock(?:/|\Z))(?!.*\.(?:/|\Z))"
    r"[A-Za-z0-9][A-Za-z0-9_.-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)*\Z"
)
BRANCH_RULE = "letters, digits, '_.-' parts joined by '/'; no '..', not HEAD, not a commit's 40 hex digits"

#: Melting Pot games re-sharded from LMDB (``pack-lmdb``): the source their shards are under (one
#: config per game), and what a game may be called.
LMDB_SOURCE = "meltingpot"
LMDB_GAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}\Z")  # no dot: a sample's key ends at its first

#: A folder name that stays inside the repository.
SAFE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*\Z")

RECORD_EXT = "json"
FRAME_EXTS = tuple(suffix.lstrip(".") for suffix in IMAGE_SUFFIXES)
PREV = "prev"


def game_config(source: str, game: str) -> str:
    """The config of one game of a source (source and game names have no hyphen, so it reads back)."""
    return f"{source}-{game}"


def split_config(name: str) -> tuple[str, str | None]:
    """(source, game) of a config name; game is None for a whole source."""
    source, _, game = name.partition("-")
    return source, game or None


def parquet_file(source: str, game: str, split: str, i: int, n: int) -> str:
    return f"{DATA}/{source}/{game}/{split}-{i:05d}-of-{n:05d}.parquet"


def parquet_pattern(source: str, split: str, game: str = "*") -> str:
    """The card's ``data_files`` glob of one split: of one game, or of every game (``*``)."""
    return f"{DATA}/{source}/{game}/{split}-*.parquet"


def tar_dir(source: str, game: str) -> str:
    return f"{WEBDATASET}/{source}/{game}"


def tar_file(source: str, game: str, split: str, i: int) -> str:
    return f"{tar_dir(source, game)}/{split}-{i:06d}.tar"


def tar_pattern(source: str, split: str, game: str = "*") -> str:
    return f"{tar_dir(source, game)}/{split}-*.tar"


def meta_dir(source: str) -> str:
    return f"{META}/{source}"


def meta_file(source: str, game: str) -> str:
    return f"{meta_dir(source)}/{game}.json"


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
    suffix = image_suffix(path)[1:]
    return f"{role}.{suffix}" if role else suffix


def is_packed(folder: Path) -> bool:
    """A folder laid out as above (a card with data, replay or WebDataset files)."""
    return (folder / CARD).is_file() and any((folder / d).is_dir() for d in (DATA, REPLAY, WEBDATASET))


def check_out_root(root: str) -> None:
    """A layout root to write games into: named, a folder where it exists, and neither a packed
    repository nor inside one (games written there were ignored by every reader of the repository,
    and would be uploaded with it). A folder above counts as a repository only with every part pack
    always writes, so a project with a README and a data/ folder is not taken for one."""
    from atari_data.errors import AtariDataError
    from atari_data.layout import check_root

    check_root(root)
    if Path(root).is_dir() and is_packed(Path(root)):
        raise AtariDataError(
            "is a packed repository (atari-data pack's output), not a layout root: write into the layout "
            "it was packed from, then pack it again",
            file=root,
            field="--root",
        )
    for above in Path(root).resolve().parents:
        if is_packed(above) and all((above / part).is_dir() for part in (META, SCHEMA)):
            raise AtariDataError(
                f"is inside the packed repository {above}: write into the layout it was packed from, then "
                "pack it again",
                file=root,
                field="--root",
            )


def data_kind(data: str | Path) -> str:
    """What a ``--data`` names: ``packed`` (a folder laid out as above), ``layout`` (another folder: a
    layout root) or ``hub`` (a repository id). A folder with part of a packed repository and no
    game of a layout (its card or ``data/`` lost) is ``packed``, so the card's reader names what is
    missing. Something there that is not a folder, a ``Path``, or a string that starts as a path
    (``.``, ``/``) and is missing, is refused: never asked of the Hub as an id."""
    from atari_data.errors import AtariDataError

    path = Path(data)
    if path.is_dir():
        if is_packed(path):
            return "packed"
        part = (path / CARD).exists() or any((path / d).is_dir() for d in (DATA, REPLAY, WEBDATASET))
        return "packed" if part and not any(path.glob("*/*/meta.json")) else "layout"
    if path.exists() or isinstance(data, Path) or str(data).startswith((".", "/")):
        raise AtariDataError("not a layout root or packed repository folder", file=str(data))
    return "hub"


def check_target(source: Path, out: Path, force: bool, what: str = "layout") -> None:
    """OUT, where a pack is about to go, may be replaced only when it is a packed repository of its
    own: never the ``source`` it packs (``what``: its name in the message), a folder holding it or
    inside it, a file, or a symlink."""
    from atari_data.errors import AtariDataError

    if out.is_symlink():
        raise AtariDataError("is a symlink; pass the folder it points to", file=str(out), field="OUT")
    r, o = source.resolve(), out.resolve()
    if r == o or r in o.parents or o in r.parents:
        raise AtariDataError(
            f"overlaps the {what} {source} (OUT must be neither it, inside it, nor around it)",
            file=str(out),
            field="OUT",
        )
    if out.exists():
        if not force:
            raise AtariDataError("exists; use --force to replace it", file=str(out), field="OUT")
        if not out.is_dir() or not is_packed(out):
            raise AtariDataError(
                "exists and is not a packed repository (README.md with data/, replay/ or webdataset/); "
                "refusing to replace it",
                file=str(out),
                field="OUT",
            )


def _contract() -> re.Pattern:
    """Every file path this contract describes, as the functions above name them."""
    from atari_data.layout import EPISODES, split_file_name
    from atari_data.layout import META as GAME_META

    source, game, lmdb_game = (rx.pattern.removesuffix(r"\Z") for rx in (SOURCE_RE, GAME_RE, LMDB_GAME_RE))
    hub_split = "|".join(HUB_SPLITS.values())
    replay_files = "|".join(re.escape(n) for n in (GAME_META, EPISODES, *map(split_file_name, SPLITS)))
    paths = [
        re.escape(CARD),
        rf"{DATA}/{source}/{game}/(?:{hub_split})-[0-9]{{5}}-of-[0-9]{{5}}\.parquet",
        rf"{WEBDATASET}/{source}/{game}/(?:{hub_split})-[0-9]{{6}}\.tar",
        rf"{WEBDATASET}/{LMDB_SOURCE}/{lmdb_game}/train-[0-9]{{6}}\.tar",
        rf"{META}/{source}/{game}\.json",
        rf"{SCHEMA}/(?:{'|'.join(SCHEMA_KINDS)})\.schema\.json",
        rf"{REPLAY}/{source}/{game}/(?:{replay_files})",
    ]
    return re.compile("(?:" + "|".join(paths) + r")\Z")


def unexpected(folder: Path, local: bool = True) -> list[tuple[Path, str, str]]:
    """Whatever in ``folder`` this contract does not describe: in the contract's folders, any file of
    another path than the shards, metas, schemas and replay files above, by the names they are
    written under. ``local`` (a folder to publish) also refuses any other top-level file, and
    symlinks (a link would upload what it points to); a Hub snapshot is links into its blobs, and
    its repository may hold the owner's files beside the dataset (``.gitattributes``, ``NOTES.md``)."""
    out = []
    contract = _contract()
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if local and p.is_symlink():
            out.append((p, "(file)", "is a symlink"))
        elif p.is_dir() or contract.match(rel.as_posix()) or (not local and rel.parts[0] not in FOLDERS):
            continue
        elif len(rel.parts) == 1:
            out.append((p, "(file)", f"is not part of a packed repository ({', '.join(sorted((CARD, *FOLDERS)))})"))
        else:
            out.append((p, "(file)", f"is not part of a packed repository: no file of this name under {rel.parts[0]}/"))
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
