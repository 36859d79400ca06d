"""The layout on disk, and reading it back.

    <root>/<source>/<Game>/{train.jsonl, val.jsonl, images/, meta.json, _READY}
                            [episodes.jsonl: seeds and moves of played sources]

``_READY`` is written last, after every other file of the game is complete (in the staged folder,
before it is swapped in whole); readers use only games that have it. Games are written by
:mod:`atari_data.layout.writer`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.schema import GAME_RE, SOURCE_RE
from laya_protocol.files import write_file, writing
from laya_protocol.locks import FileLock as _FileLock
from laya_protocol.names import HUB_SPLITS, SPLITS

READY = "_READY"
META = "meta.json"
#: Optional, for played sources: per episode the ALE seed and every move, so frames can be rebuilt.
EPISODES = "episodes.jsonl"
#: An episodes.jsonl line's keys, in the order written: nothing else is read, so nothing else is kept.
EPISODE_KEYS = ("episode", "split", "seed", "moves", "decisions")


def split_file_name(split: str) -> str:
    """A split's records in a game folder: ``train.jsonl``, ``val.jsonl``; another split is one line
    naming them (the Hub's ``validation`` read as a missing file)."""
    if split not in SPLITS:
        raise AtariDataError(
            f"{split!r} is not a split of a layout ({', '.join(SPLITS)}; the Hub names val {HUB_SPLITS['val']!r})",
            field="split",
        )
    return f"{split}.jsonl"


def check_root(root: str) -> None:
    """A layout root is named (an empty one wrote into the working folder) and, where it exists, is a
    folder (a file there was a NotADirectoryError traceback)."""
    if not root:
        raise AtariDataError("is empty: name the layout root (. for this folder)", field="--root")
    if Path(root).exists() and not Path(root).is_dir():
        raise AtariDataError("is not a folder (a layout root holds <source>/<game>/)", file=root, field="--root")


@dataclass(frozen=True)
class GameDir:
    """One (source, game) folder of a layout. ``follow=False`` (pack) reads a game's own
    files without following a link: validate refuses a link in a layout, and a file swapped for one
    after it is refused by the read itself. Readers for training follow links (a copy made of
    links, as git-annex or DVC keep data, trains as it is)."""

    root: Path
    source: str
    game: str
    follow: bool = True

    def __post_init__(self):
        object.__setattr__(self, "root", Path(self.root))

    @property
    def path(self) -> Path:
        return self.root / self.source / self.game

    @property
    def ready(self) -> bool:
        return (self.path / READY).is_file()

    def split_file(self, split: str) -> Path:
        return self.path / split_file_name(split)

    def pin(self) -> FolderPin:
        """The folder as it stands now, held open: see :class:`FolderPin`. OSError when the game is gone
        (mid-swap)."""
        return FolderPin(self.path)

    def meta(self) -> dict:
        return read_json(self.path / META, follow=self.follow)

    def records(self, split: str = "train") -> Iterator[dict]:
        """The records of one split, in file order."""
        for _, rec in read_jsonl(self.split_file(split), "(record)", follow=self.follow):
            yield rec

    @functools.cached_property
    def frame_want(self) -> tuple[str, tuple[int, int]]:
        """(mode, (width, height)) its meta.json's frame_format says each frame is (:func:`schema.frame_want`)."""
        from atari_data.schema import frame_want

        return frame_want(self.meta(), str(self.path / META))

    def frame(self, rec: dict, prev: bool = False) -> np.ndarray:
        """A record's frame (or previous frame) as a uint8 array, H x W (gray) or H x W x 3, of the
        size and mode its meta.json says."""
        from atari_data.layout.png import decode_frame, formats_of
        from atari_data.limits import read_bytes

        rel = rec["prev_image" if prev else "image"]
        path = safe_join(self.path, rel)
        want = self.frame_want
        try:
            data = read_bytes(path, "frame", "image", follow=self.follow)
            return decode_frame(data, want, formats_of(path.name))  # as its name says
        except (OSError, ValueError, zlib.error) as e:
            raise AtariDataError(f"cannot read frame ({e})", file=str(path), field="image") from None


#: What swaps a game folder in whole; a packed repository is swapped by pack --force.
GAME_SWAPPERS = "a generate, import or dagger --force of it?"
PACK_SWAPPER = "a pack --force of it?"


def replaced(path: Path, while_it_was: str, again: str, by: str = GAME_SWAPPERS) -> AtariDataError:
    """The error of a folder swapped while it was read (``while_it_was``: read, packed, validated,
    checked); ``again`` is what to run once the swap has finished, ``by`` what likely swapped it."""
    return AtariDataError(
        f"was replaced while it was {while_it_was} ({by}); {again} again once that has finished",
        file=str(path),
        field="(folder)",
    )


class FolderPin:
    """A folder held open by a descriptor, to tell whether its path still names it. generate and
    import swap a finished game in as a new folder, and train a checkpoint; readers take no lock (a
    read-only layout reads), so one that reads a folder over time pins it first and checks before
    trusting what it read. The open folder keeps its inode, so no later folder can be given the same
    one, and a mode changed or a file added (which change a folder's ctime) is not taken for a swap."""

    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None  # set first: __del__ runs on a pin whose open failed too
        self._fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        st = os.fstat(self._fd)
        self._id = st.st_dev, st.st_ino

    def same(self) -> bool:
        try:
            st = os.stat(self.path)
        except OSError:  # gone, mid-swap
            return False
        return (st.st_dev, st.st_ino) == self._id

    def unchanged(self, reader: str) -> None:
        """Refuse to go on when the path no longer names the pinned folder."""
        if not self.same():
            raise self.replaced("read", reader)

    def replaced(self, while_it_was: str, again: str, by: str = GAME_SWAPPERS) -> AtariDataError:
        return replaced(self.path, while_it_was, again, by)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self):
        self.close()


def safe_join(base: Path, rel: str, field: str = "image") -> Path:
    """``base / rel``, refusing paths that would leave ``base``."""
    return Path(join_inside(str(base), rel, field))


def join_plain(base: str, rel: str, field: str = "image") -> str:
    """:func:`join_inside`, refusing also a folder on the way that is a symlink: a no-follow open
    looks at the path's last part only, and a linked folder would reach past ``base``. On strings:
    pack checks every frame."""
    from laya_protocol.files import LINK

    path = join_inside(base, rel, field)
    parts = rel.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        if os.path.islink(os.path.join(base, *parts[:i])):
            raise AtariDataError(f"{'/'.join(parts[:i])} is {LINK}", file=str(base), field=field)
    return path


def leaves_folder(rel: str) -> bool:
    """Whether a relative path (a record's image, a card's pattern, a tar member's name) could
    name something outside its folder: absolute, or with a ``..`` part."""
    return rel.startswith("/") or ".." in rel.split("/")


def join_inside(base: str, rel: str, field: str = "image") -> str:
    """:func:`safe_join` on strings (no Path objects: pack joins two a record)."""
    if leaves_folder(rel):
        raise AtariDataError(f"path {rel!r} leaves its folder", file=base, field=field)
    return os.path.join(base, rel)  # "" stays relative, "/" gives no "//"


def list_games(
    root: str | os.PathLike, sources=None, games=None, ready_only: bool = True, follow: bool = True
) -> list[GameDir]:
    """The game folders under ``root``, sorted by (source, game); only ready ones by default;
    ``follow`` as :class:`GameDir` has it."""
    root = Path(root)
    if not root.is_dir():
        raise AtariDataError("is not a directory", file=str(root), field="root")
    out = []
    for sdir in sorted(p for p in root.iterdir() if _named(p, SOURCE_RE, f"*/{READY}")):
        if sources and sdir.name not in sources:
            continue
        for gdir in sorted(p for p in sdir.iterdir() if _named(p, GAME_RE, READY)):
            if games and gdir.name not in games:
                continue
            g = GameDir(root, sdir.name, gdir.name, follow)
            if g.ready or not ready_only:
                out.append(g)
    return out


def _named(path: Path, pattern, ready: str) -> bool:
    """Whether ``path`` is a folder the layout reads by its name. One of another name holding a
    ready game (``ready`` a glob: ``Expert-2f/Pong``, ``expert2f/Pong-v5``) is an error: skipped,
    it would be absent without a word. Hidden names (staging folders, locks) are the writers' own."""
    if not path.is_dir() or path.name.startswith("."):
        return False
    if pattern.match(path.name):
        return True
    if any(path.glob(ready)):
        raise AtariDataError(
            "holds a ready game but is not named <source>/<Game> (a source is lowercase letters, digits "
            "and _, starting with a letter; a game is letters and digits): rename it to be read",
            file=str(path),
            field="(folder)",
        )
    return False


def read_jsonl(path: Path, field: str = "(record)", follow: bool = True) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSONL file read within the file limit, each
    line within the record limit. Lines split on ``\\n`` only: JSON text may hold other line
    separators (U+2028) verbatim."""
    from atari_data.limits import check, limit

    cap = limit("record")
    for n, line in enumerate(read_file(path, follow=follow).split(b"\n"), 1):
        if len(line) > cap:  # checked before it is parsed, into up to 30 times its size
            check("record", len(line), file=str(path), line=n, field=field)
        if line.strip():
            yield n, parse_json_line(line, str(path), n, field)


def read_file(path: Path | str, kind: str = "file", field: str = "(file)", follow: bool = True) -> bytes:
    """A whole file within the limit of ``kind``; missing or unreadable (a folder in its place, a NUL
    in its name, a link where ``follow`` is False) is one AtariDataError."""
    from atari_data.limits import read_bytes

    try:
        return read_bytes(path, kind, field, follow)
    except FileNotFoundError:
        raise AtariDataError("is missing", file=str(path), field=field) from None
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or e
        raise AtariDataError(f"cannot be read ({why})", file=str(path), field=field) from None


def parse_json_line(line: bytes, file: str, n: int | None, field: str):
    """One JSON text (a JSONL line, or a whole file with ``n`` None); any defect (not UTF-8, not JSON,
    too deep, a number too long) is one AtariDataError."""
    try:
        return json.loads(line.decode("utf-8"))
    except json.JSONDecodeError as e:
        raise AtariDataError(
            f"is not valid JSON ({e.msg})", file=file, line=e.lineno if n is None else n, field=field
        ) from None
    except UnicodeDecodeError as e:
        raise AtariDataError(f"is not UTF-8 (byte {e.start})", file=file, line=n, field=field) from None
    except (ValueError, RecursionError) as e:
        raise AtariDataError(
            f"is not JSON this reader accepts ({str(e)[:120] or type(e).__name__})", file=file, line=n, field=field
        ) from None


def copy_plain(src: Path, dest: Path, follow: bool = False) -> None:
    """Copy one small file as it is read here (a regular file within the file limit), never a FIFO
    or device; a link is refused unless ``follow`` (a game's own files are read as :class:`GameDir`
    reads them, so what is published is what was checked)."""
    write_file(dest, read_file(src, follow=follow))


def read_json(path: Path, follow: bool = True) -> dict:
    """A JSON object from ``path``; anything else (missing, too big, not UTF-8, not JSON, nested past
    Python's recursion limit, a number past its digit limit, not an object) is one AtariDataError."""
    from atari_data.limits import check_parsed

    text = read_file(path, follow=follow)
    check_parsed(len(text), file=str(path))  # held parsed whole: some 30 times its text
    value = parse_json_line(text, str(path), None, "(file)")
    if not isinstance(value, dict):
        raise AtariDataError(f"holds a JSON {type(value).__name__}, expected an object", file=str(path), field="(file)")
    return value


def GameLock(root: str | os.PathLike, source: str, game: str) -> _FileLock:  # noqa: N802 - reads as the lock it is
    """The lock of one (source, game) folder, ``<root>/<source>/.<Game>.lock``, held by whoever
    assembles it: a second writer is refused at once with one line rather than racing the first over
    the same staging folder."""
    for value, rx, what in ((source, SOURCE_RE, "source"), (game, GAME_RE, "game")):
        if not isinstance(value, str) or not rx.match(value):  # before any folder is made for it
            pattern = rx.pattern.removesuffix("\\Z")
            raise AtariDataError(f"{value!r} does not match {pattern}", file=str(root), field=what)
    parent = Path(root) / source
    if parent.is_symlink():  # the game would be written wherever it points, outside the root
        raise AtariDataError(
            "is a symbolic link (a layout is plain files and folders; pass the folder it points to as the root)",
            file=str(parent),
            field="(folder)",
        )
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file where the root or the source folder goes
        raise AtariDataError(f"cannot be made a folder ({e.strerror})", file=str(parent), field="(folder)") from None
    return OutputLock(parent / game, f"{source}/{game}")


def OutputLock(target: str | os.PathLike, what: str) -> _FileLock:  # noqa: N802 - reads as the lock it is
    """laya_protocol's one-writer lock of ``target`` (beside it), its refusals as one AtariDataError
    naming the lock file."""
    return _FileLock.beside(target, what, lambda message, file: AtariDataError(message, file=file, field="(lock)"))


def set_aside(final: Path) -> Path:
    """Where :func:`swap_into_place` keeps the old ``final`` between its two renames: a reader that
    finds ``final`` missing and this present has met a swap, and reads again."""
    return final.with_name(f".{final.name}.old")


def put_back(final: Path) -> None:
    """Where :func:`swap_into_place` was stopped between its two renames (``final`` absent, the old
    one set aside), put the old one back; call it holding what stops another swap of ``final``."""
    old = set_aside(final)
    if not (final.exists() or final.is_symlink()) and old.is_dir() and not old.is_symlink():
        os.replace(old, final)


def swap_into_place(new: Path, final: Path) -> None:
    """Move the finished folder ``new`` to ``final``; an old ``final`` is set aside first and deleted
    only once the new one is in place, so a kill at any moment leaves ``final`` whole (old or new) or,
    between the two renames, absent with the old one intact beside it (:func:`set_aside`)."""
    old = set_aside(final)
    remove(old)  # a link or a file there goes itself, never what it points at
    if final.exists() or final.is_symlink():
        os.replace(final, old)
    os.replace(new, final)
    remove(old)


@contextmanager
def staged_game(root: str | os.PathLike, source: str, game: str, kind: str) -> Iterator[GameDir]:
    """A fresh one-game layout ``<root>/<source>/.<Game>.<kind>/<source>/<Game>/`` (with ``images/``)
    to assemble a game in; removed on the way out, whatever happened (a committed game has left it)."""
    stage = Path(root) / source / f".{game}.{kind}"
    remove(stage)  # a planted link goes itself, never what it points at
    staged = GameDir(stage, source, game)
    (staged.path / "images").mkdir(parents=True)
    try:
        yield staged
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def fresh_file(path: Path):
    """``path`` created anew for writing: whatever was there (a link planted to a file elsewhere, a
    FIFO that would wait for a reader) is removed, never written through; O_EXCL makes sure."""
    remove(path)
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb")


def remove(path: Path) -> None:
    """Remove a file, folder or link at ``path`` (a link itself, never what it points at)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@contextmanager
def staged(tmp: Path) -> Iterator[Path]:
    """``tmp``, a temporary that the block renames into place, removed if the block fails or is
    stopped (a Ctrl-C, or a SIGTERM raised as one) so that no half-written output is left."""
    try:
        yield tmp
    except BaseException:
        remove(tmp)
        raise


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary name, flushed to disk before the rename; a link
    at either name is replaced, never followed."""
    with staged(path.with_name(f".{path.name}.tmp")) as tmp:
        with writing(path), fresh_file(tmp) as f:  # a write's error names no file
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
