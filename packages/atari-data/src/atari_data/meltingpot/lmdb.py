"""Melting Pot world-model LMDBs: read them safely, check them, load them, re-shard them.

These are not game decisions and are not forced into the record schema. One LMDB environment per
game folder (``data.mdb``); every row a pickled dict (the guide's schema)::

    video_latents      [T_lat, 16, H, W]  float16   VAE latents of a 17-frame clip
    actions            [S, T_action]      int64     per-player actions (0 = NOOP padding)
    frame_coords       [T_lat, S, 2]      float32   (x, y) pixels on the canvas
    orientations       [T_lat, S]         int64     0=N 1=E 2=S 3=W
    initial_positions  [S, 2]             float32   (x, y) at the clip's first frame
    num_players        int                          the game's real S
    prompt             str                          the game's slug

Unpickling runs code, so rows are read with an unpickler that builds numpy arrays (from the bytes
the row holds), dtypes and sets only; a row that needs anything else, or that would have a few
bytes call for memory of any size (``numpy.ndarray(shape)``, ``bytes(n)``), is refused with its
key. ``pack_lmdb`` writes WebDataset shards (``.json`` + one ``.npy`` per array, no pickle) and a
card, for ``publish`` and ``doctor``.
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import pickletools
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import remove, swap_into_place
from atari_data.publish import repo
from laya_protocol.files import write_file

ARRAYS = {
    "video_latents": (4, np.float16),
    "actions": (2, np.int64),
    "frame_coords": (3, np.float32),
    "orientations": (2, np.int64),
    "initial_positions": (2, np.float32),
}
SCALARS = {"num_players": int, "prompt": str}
log = logging.getLogger(__name__)
_CORE = ("numpy.core", "numpy._core")


class _Refused(pickle.UnpicklingError):
    pass


class _ArrayType:
    """What ``numpy.ndarray`` unpickles as: an argument for :func:`_reconstruct`, never a call
    (``ndarray(shape)`` is an uninitialised array of any size, from a few bytes)."""

    def __call__(self, *_args, **_kwargs):
        raise _Refused("refused to call numpy.ndarray (an array comes with its data)")


_ARRAY = _ArrayType()


def _reconstruct(subtype, shape, _dtype):
    """numpy's ``_reconstruct`` as numpy pickles an array: an empty one, which the row's bytes then
    fill (``__setstate__`` checks they are as many as the shape needs); any other shape is memory
    asked for, not data given."""
    if subtype is not _ARRAY or tuple(shape) != (0,):
        raise _Refused("refused numpy _reconstruct other than of an empty array")
    return np.empty(0, np.uint8)


def _of(kinds: tuple, call):
    """``call`` taking only arguments of ``kinds`` (``bytes(n)`` and ``bytearray(n)`` are n zeros)."""

    def checked(*args):
        if len(args) > 1 or any(not isinstance(a, kinds) for a in args):
            raise _Refused(f"refused {call.__name__}() of {[type(a).__name__ for a in args]}")
        return call(*args)

    return checked


def _scalar(dtype, data=None):
    """numpy's ``scalar`` given its bytes: without them ``scalar(dtype('V<n>'))`` is n zero bytes."""
    from numpy._core.multiarray import scalar

    if not isinstance(dtype, np.dtype) or not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise _Refused("refused numpy scalar other than of its own bytes")
    return scalar(dtype, data)


def _frombuffer(buf, dtype, shape, order):
    """numpy's ``_frombuffer`` (protocol 5) of the row's own bytes: given another array, the result
    would share memory that a later BUILD on that array frees."""
    from numpy._core.numeric import _frombuffer as frombuffer

    if not isinstance(buf, (bytes, bytearray)) or not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise _Refused(f"refused numpy _frombuffer of {type(buf).__name__}")
    return frombuffer(buf, dtype, shape, order)


#: Every callable a row's pickle may name, as built here.
SAFE = {
    ("numpy", "ndarray"): _ARRAY,
    ("numpy", "dtype"): np.dtype,
    **{(f"{m}.multiarray", "_reconstruct"): _reconstruct for m in _CORE},
    **{(f"{m}.multiarray", "scalar"): _scalar for m in _CORE},
    **{(f"{m}.numeric", "_frombuffer"): _frombuffer for m in _CORE},
    ("builtins", "set"): _of((list, tuple), set),
    ("builtins", "frozenset"): _of((list, tuple), frozenset),
    ("builtins", "bytearray"): _of((bytes,), bytearray),
}

#: A row's pickle is a dict of seven entries (about 200 opcodes at protocols 3-5); each opcode can
#: build an object many times its byte (``}`` is an empty dict), so their number is capped.
MAX_OPCODES = 4096


def _prescan(data: bytes) -> None:
    """Refuse, before anything is built, what would grow past the row's bytes: too many opcodes.
    A memo index past the opcodes read is refused too: no pickler writes one (the C unpickler sized
    its memo from it; the Python one used here keeps a dict)."""
    for n, (op, arg, _) in enumerate(pickletools.genops(data)):
        if n >= MAX_OPCODES:
            raise _Refused(f"refused a pickle of more than {MAX_OPCODES} opcodes")
        if op.name in ("PUT", "BINPUT", "LONG_BINPUT") and not (isinstance(arg, int) and 0 <= arg <= n):
            raise _Refused(f"refused memo index {arg} at opcode {n}")


class _SafeUnpickler(pickle._Unpickler):
    """The standard library's Python unpickler (its memo a dict, and its BUILD step open to a
    check), naming only the callables above."""

    def find_class(self, module: str, name: str):
        if (module, name) in SAFE:
            return SAFE[(module, name)]
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")

    def load_build(self):
        # A dtype's state can set flags or metadata that leave it equal to the schema's dtype while
        # numpy's loops fail on it, even as the array is freed: only a dtype's own state passes.
        # An array's state fills the empty array _reconstruct gave, once, from bytes: an object
        # dtype is filled from a list numpy does not measure (a crash), and a second BUILD frees
        # memory other arrays may share. Nothing else is built.
        inst, state = (self.stack[-2], self.stack[-1]) if len(self.stack) >= 2 else (None, None)
        if isinstance(inst, np.dtype):
            if state != inst.__reduce__()[2]:
                raise _Refused(f"refused dtype {inst} with state {state!r}")
        elif not (
            type(inst) is np.ndarray
            and inst.shape == (0,)
            and inst.dtype == np.uint8
            and isinstance(state, tuple)
            and len(state) == 5
            and isinstance(state[2], np.dtype)
            and not state[2].hasobject
            and isinstance(state[4], (bytes, bytearray))
        ):
            raise _Refused(f"refused to build a {type(inst).__name__} from {type(state).__name__}")
        super().load_build()

    def _set(self, target: dict, key, value) -> None:
        # Python's pickler writes each key of a dict once; a pickle written to set one twice would have
        # the last value win, unsaid: a row other readers of the source would read differently.
        if key in target:
            raise _Refused(f"refused a dict with {key!r} given twice")
        target[key] = value

    def load_setitem(self):
        value, key = self.stack.pop(), self.stack.pop()
        self._set(self.stack[-1], key, value)

    def load_setitems(self):
        items = self.pop_mark()
        for i in range(0, len(items), 2):
            self._set(self.stack[-1], items[i], items[i + 1])

    def load_dict(self):
        items, d = self.pop_mark(), {}
        for i in range(0, len(items), 2):
            self._set(d, items[i], items[i + 1])
        self.append(d)

    dispatch: ClassVar[dict] = {
        **pickle._Unpickler.dispatch,  # type: ignore[attr-defined]
        pickle.BUILD[0]: load_build,
        pickle.SETITEM[0]: load_setitem,
        pickle.SETITEMS[0]: load_setitems,
        pickle.DICT[0]: load_dict,
    }


def safe_loads(data: bytes):
    _prescan(data)
    return _SafeUnpickler(io.BytesIO(data)).load()


def check_row(row, where: str, key: str) -> dict:
    """The row if it follows the schema; otherwise a one-line error naming the key and field."""

    def bad(fld, msg):
        return AtariDataError(f"row {key}: {msg}", file=where, field=fld)

    if not isinstance(row, dict):
        raise bad("(row)", f"is a {type(row).__name__}, expected a dict")
    expected = set(ARRAYS) | set(SCALARS)
    missing, unknown = expected - set(row), set(row) - expected
    if missing or unknown:
        names = sorted(missing, key=repr), sorted(unknown, key=repr)  # keys of any type
        raise bad(str((names[0] or names[1])[0]), f"missing {names[0]}, unknown {names[1]}")
    for name, (ndim, dtype) in ARRAYS.items():
        a = row[name]
        if not isinstance(a, np.ndarray) or a.ndim != ndim or a.dtype != dtype:
            got = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise bad(name, f"is {got}, expected {np.dtype(dtype)} with {ndim} dimensions")
    for name, typ in SCALARS.items():
        if not isinstance(row[name], typ) or isinstance(row[name], bool):
            raise bad(name, f"is {type(row[name]).__name__}, expected {typ.__name__}")
    vl, acts, fc, ori, ip = (row[k] for k in ARRAYS)
    t_lat, s = vl.shape[0], acts.shape[0]
    if 0 in vl.shape or 0 in acts.shape:
        raise bad("video_latents", f"has no time steps: video_latents {vl.shape}, actions {acts.shape}")
    if vl.shape[1] != 16:
        raise bad("video_latents", f"has {vl.shape[1]} channels, expected 16")
    if fc.shape != (t_lat, s, 2) or ori.shape != (t_lat, s) or ip.shape != (s, 2):
        raise bad(
            "frame_coords",
            f"shapes disagree: video_latents {vl.shape}, actions {acts.shape}, frame_coords "
            f"{fc.shape}, orientations {ori.shape}, initial_positions {ip.shape}",
        )
    if not 1 <= row["num_players"] <= s:
        raise bad("num_players", f"{row['num_players']} with {s} player rows")
    for name in ("video_latents", "frame_coords", "initial_positions"):
        if not np.isfinite(row[name]).all():
            raise bad(name, "holds NaN or infinity")
    if acts.size and acts.min() < 0:
        raise bad("actions", f"holds {acts.min()}, expected action ids >= 0 (0 is NOOP padding)")
    if ori.size and not (0 <= ori.min() and ori.max() <= 3):
        raise bad("orientations", f"holds {ori.min()}..{ori.max()}, expected 0..3 (N, E, S, W)")
    return row


def read_lmdb(folder: str | Path) -> Iterator[tuple[str, dict]]:
    """(key as hex, checked row) for every row of one game's LMDB, in key order."""
    try:
        import lmdb
    except ImportError:
        raise AtariDataError("reading LMDBs needs the lmdb extra: pip install 'atari-data[lmdb]'") from None

    folder = Path(folder)
    if not (folder / "data.mdb").is_file():
        raise AtariDataError("has no data.mdb (one LMDB environment per game folder)", file=str(folder))
    try:
        env = lmdb.open(str(folder), readonly=True, lock=False, readahead=False, subdir=True)
    except lmdb.Error as e:
        raise AtariDataError(f"is not a readable LMDB ({e})", file=str(folder)) from None
    try:
        with env:
            # A page past the end of the mapped file is SIGBUS, not an error: LMDB reads no page past
            # the meta page's last one, so the file must hold that many.
            pages, psize = env.info()["last_pgno"] + 1, env.stat()["psize"]
            size = (folder / "data.mdb").stat().st_size
            if pages * psize > size:
                raise AtariDataError(
                    f"is shorter than its {pages} pages of {psize} bytes ({size} bytes): truncated",
                    file=str(folder / "data.mdb"),
                )
            if problem := _large_values_problem(folder / "data.mdb", psize, size):
                raise AtariDataError(f"{problem}: damaged", file=str(folder / "data.mdb"), field="(page)")
            with env.begin() as txn:
                yield from _rows(txn, str(folder))
    except lmdb.Error as e:  # a damaged page, found as the cursor reaches it
        raise AtariDataError(f"is not a readable LMDB ({type(e).__name__}: {e})", file=str(folder)) from None


#: LMDB's page layout (lmdb.h, 64-bit): a 16-byte header (page number, pad, flags, then lower and
#: upper bounds, or an overflow run's page count); node offsets follow. A node is its data size (or a
#: branch's child page, with its flags), flags and key size (8 bytes), the key, then the value, or
#: for a large value (F_BIGDATA) the number of its first overflow page, or for a named database
#: (F_SUBDATA) that database's record, whose root is its last 8 bytes. A meta page (0 and 1) holds
#: the main database's record at byte 88 and its transaction id at byte 144.
PAGE_HEADER, NODE_HEADER = 16, 8
P_BRANCH, P_LEAF, P_OVERFLOW, P_LEAF2 = 0x01, 0x02, 0x04, 0x20
F_BIGDATA, F_SUBDATA = 0x01, 0x02
META_MAIN_ROOT, META_TXNID, DB_ROOT, NO_PAGE = 128, 144, 40, 2**64 - 1


def _large_values_problem(path: Path, psize: int, size: int) -> str | None:
    """What is wrong with a large value the live tree holds (a node declaring more bytes than its
    overflow pages hold, or pages past the file's end), found with plain reads from the newer meta
    page's root down: LMDB itself would hand over a view past the mapped file, and touching it is
    SIGBUS, not an error. Pages LMDB has freed keep old bytes, and are not read."""
    import struct

    pages = size // psize

    def page(f, n: int) -> bytes:
        f.seek(n * psize)
        return f.read(psize)

    with open(path, "rb") as f:
        metas = [page(f, n) for n in (0, 1)]
        newer = max(metas, key=lambda m: struct.unpack_from("<Q", m, META_TXNID)[0] if len(m) >= 152 else -1)
        todo, seen = [struct.unpack_from("<Q", newer, META_MAIN_ROOT)[0]], set()
        while todo:
            n = todo.pop()
            if n == NO_PAGE or n in seen:
                continue
            if n >= pages:
                return f"page {n} of the tree is past the end of the file"
            seen.add(n)
            data = page(f, n)
            number, flags, lower = struct.unpack_from("<Q2xHH", data, 0)
            if number != n or flags & P_OVERFLOW or not flags & (P_BRANCH | P_LEAF):
                return f"page {n} of the tree is no branch or leaf page of its place"
            if flags & P_LEAF2:  # keys packed end to end: no nodes, no large values
                continue
            for k in range(max(0, (min(lower, psize) - PAGE_HEADER) // 2)):
                node = struct.unpack_from("<H", data, PAGE_HEADER + 2 * k)[0]
                if node + NODE_HEADER > psize:
                    return f"page {n}: a node at byte {node} lies past the page"
                lo, hi, node_flags, ksize = struct.unpack_from("<4H", data, node)
                at = node + NODE_HEADER + ksize  # where the node's value starts
                if flags & P_BRANCH:
                    todo.append(lo | hi << 16 | node_flags << 32)  # the child page
                elif node_flags & F_SUBDATA:  # a named database: its own tree
                    if at + DB_ROOT + 8 > psize:
                        return f"page {n}: a named database's record runs past the page"
                    todo.append(struct.unpack_from("<Q", data, at + DB_ROOT)[0])
                elif node_flags & F_BIGDATA:
                    if at + 8 > psize:
                        return f"page {n}: a node's key runs past the page"
                    first, declared = struct.unpack_from("<Q", data, at)[0], lo | hi << 16
                    if first >= pages:
                        return f"page {n}: a value's overflow page {first} is past the end of the file"
                    head = page(f, first)[:PAGE_HEADER]
                    number, flags_there, run = struct.unpack_from("<Q2xHI", head, 0)
                    if number != first or not flags_there & P_OVERFLOW or PAGE_HEADER + declared > run * psize:
                        return f"page {n}: a value of {declared:,} bytes is more than its overflow pages hold"
                    if first + run > pages:
                        return f"page {n}: a value's {run} overflow pages run past the end of the file"
    return None


def _rows(txn, folder: str) -> Iterator[tuple[str, dict]]:
    from atari_data import limits

    for raw_key, value in txn.cursor():
        key = raw_key.hex()
        limits.check("member", len(value), file=folder, field=f"row {key}")  # before it is unpickled
        try:
            row = safe_loads(value)
        except Exception as e:  # noqa: BLE001 - UnpicklingError for refused classes, others for damaged bytes
            why = (
                f"refused ({e})"
                if isinstance(e, _Refused)
                else f"not loadable without running code ({type(e).__name__}: {e})"
            )
            raise AtariDataError(f"row {key}: {why}", file=folder, field="(row)") from None
        yield key, check_row(row, folder, key)


def load_sample(row: dict, subjects: int, canvas_size: int = 512) -> dict:
    """The guide's loader semantics: actions and coordinates padded to ``subjects`` players with a
    ``subject_mask`` (True for the game's real players), coordinates divided by the canvas size."""
    s = row["actions"].shape[0]
    if s > subjects:
        raise ValueError(f"{s} players do not fit {subjects} subjects")
    actions = np.zeros((subjects, row["actions"].shape[1]), np.int64)
    actions[:s] = row["actions"]
    coords = np.zeros((row["frame_coords"].shape[0], subjects, 2), np.float32)
    coords[:, :s] = row["frame_coords"] / canvas_size
    mask = np.zeros(subjects, bool)
    mask[: row["num_players"]] = True
    return {
        "video_latents": row["video_latents"],
        "actions": actions,
        "frame_coords": coords,
        "subject_mask": mask,
        "orientations": row["orientations"],
        "prompt": row["prompt"],
    }


# -- re-sharding -----------------------------------------------------------------------------------


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), 0, 0o644
    tar.addfile(info, io.BytesIO(data))


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


ROWS_PER_SHARD = 500  # records a WebDataset shard holds, by default
CARD_NAME = "meltingpot"  # the card's title, by default


def pack_lmdb(
    src: str | Path,
    out: str | Path,
    rows_per_shard: int = ROWS_PER_SHARD,
    name: str = CARD_NAME,
    force: bool = False,
) -> dict:
    """Every ``<src>/<game>/`` LMDB as WebDataset shards ``<out>/webdataset/meltingpot/<game>/train-NNNNNN.tar``
    plus ``<out>/README.md``; written beside ``out`` and swapped into place, one pack into ``out`` at
    a time, which may replace only a packed repository (with ``force``). Returns rows per game."""
    from atari_data.layout import OutputLock

    src, out = Path(src), Path(os.path.abspath(out))
    if type(rows_per_shard) is not int or rows_per_shard < 1:
        raise AtariDataError(f"{rows_per_shard!r} is not a row count >= 1", field="--rows-per-shard")
    folders = sorted(p for p in src.iterdir() if p.is_dir() and not p.name.startswith(".")) if src.is_dir() else []
    games = [p.name for p in folders if (p / "data.mdb").is_file()]
    if skipped := [p.name for p in folders if p.name not in games]:  # said, not dropped unsaid
        log.warning(
            "skipped %d folder%s of SRC without data.mdb: %s",
            len(skipped),
            "" if len(skipped) == 1 else "s",
            ", ".join(skipped[:10]) + (", ..." if len(skipped) > 10 else ""),
        )
    if not games:
        what = "does not exist" if not src.exists() else "is not a folder" if not src.is_dir() else ""
        raise AtariDataError(what or "holds no <game>/data.mdb folders", file=str(src))
    for game in games:
        if not repo.LMDB_GAME_RE.match(game):  # it names shards, a config and a card line
            raise AtariDataError(
                f"{game!r} is not a game folder name (a letter or digit, then up to 99 of them and '_-')",
                file=str(src / game),
            )
    repo.check_target(src, out, force, "source")
    out.parent.mkdir(parents=True, exist_ok=True)
    lock = OutputLock(out, str(out))
    try:
        return _pack_lmdb(src, games, out, rows_per_shard, name)
    finally:
        lock.release()


def _pack_lmdb(src: Path, games: list[str], out: Path, rows_per_shard: int, name: str) -> dict:
    tmp = out.with_name(f".{out.name}.partial")
    remove(tmp)
    try:  # a refused or interrupted pack leaves no staging folder behind
        counts = {}
        for game in games:
            (tmp / repo.tar_dir(repo.LMDB_SOURCE, game)).mkdir(parents=True)
            n, tar = 0, None
            try:
                for key, row in read_lmdb(src / game):
                    if n % rows_per_shard == 0:
                        if tar is not None:
                            tar.close()
                        shard = tmp / repo.tar_file(repo.LMDB_SOURCE, game, "train", n // rows_per_shard)
                        tar = tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT)
                    assert tar is not None
                    sample = f"{game}-{n:06d}"
                    record = {"game": game, "lmdb_key": key, "num_players": row["num_players"], "prompt": row["prompt"]}
                    _add(tar, f"{sample}.json", json.dumps(record).encode())
                    for field in ARRAYS:
                        _add(tar, f"{sample}.{field}.npy", _npy(row[field]))
                    n += 1
            finally:
                if tar is not None:
                    tar.close()
            if n == 0:  # its card config would match no file: load_dataset fails on it
                raise AtariDataError("holds no clips (a packed game needs at least one)", file=str(src / game))
            counts[game] = n
        _write_card(tmp / repo.CARD, name, counts)
        swap_into_place(tmp, out)
        return counts
    except BaseException:
        remove(tmp)
        raise


def _write_card(path: Path, name: str, counts: dict) -> None:
    import yaml

    header = {
        "pretty_name": name,
        "tags": ["melting-pot", "world-model", "webdataset"],
        "configs": [
            {
                "config_name": g,
                "data_files": [{"split": "train", "path": repo.tar_pattern(repo.LMDB_SOURCE, "train", g)}],
            }
            for g in counts
        ],
        "lmdb_pack": {"games": counts},
    }
    fields = "\n".join(f"| `{k}` | {ARRAYS[k][0]}-d `{np.dtype(ARRAYS[k][1])}` |" for k in ARRAYS)
    body = (
        f"# {name}\n\nMelting Pot world-model clips re-sharded from per-game LMDBs by `atari-data pack-lmdb`: "
        "one WebDataset sample per LMDB row, `<sample>.json` (game, lmdb_key, num_players, prompt) and one "
        "`<sample>.<array>.npy` per array (no pickle anywhere).\n\n| array | shape / dtype |\n| --- | --- |\n"
        f"{fields}\n\n| game | clips |\n| --- | ---: |\n"
        + "\n".join(f"| {g} | {n} |" for g, n in counts.items())
        + "\n"
    )
    write_file(path, "---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n\n" + body)
