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

Unpickling runs code, so rows are read with an unpickler that builds numpy arrays, dtypes and
plain builtins only; a row that needs anything else is refused with its key. ``pack_lmdb`` writes
WebDataset shards (``.json`` + one ``.npy`` per array, no pickle) and a card, for ``publish`` and
``doctor``.
"""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.publish import repo

ARRAYS = {
    "video_latents": (4, np.float16),
    "actions": (2, np.int64),
    "frame_coords": (3, np.float32),
    "orientations": (2, np.int64),
    "initial_positions": (2, np.float32),
}
SCALARS = {"num_players": int, "prompt": str}
SAFE = (
    {("numpy", "ndarray"), ("numpy", "dtype")}
    | {(m, n) for m in ("numpy.core.multiarray", "numpy._core.multiarray") for n in ("_reconstruct", "scalar")}
    | {(m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")}
)
SAFE_BUILTINS = {
    "dict",
    "list",
    "tuple",
    "set",
    "frozenset",
    "str",
    "bytes",
    "bytearray",
    "int",
    "float",
    "complex",
    "bool",
}


class _SafeUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in SAFE or (module == "builtins" and name in SAFE_BUILTINS):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refused to load {module}.{name}")


def safe_loads(data: bytes):
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
        raise bad(sorted(missing or unknown)[0], f"missing {sorted(missing)}, unknown {sorted(unknown)}")
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
    with env, env.begin() as txn:
        for raw_key, value in txn.cursor():
            key = raw_key.hex()
            try:
                row = safe_loads(value)
            except Exception as e:  # noqa: BLE001 - UnpicklingError for refused classes, others for damaged bytes
                raise AtariDataError(
                    f"row {key}: not loadable without running code ({type(e).__name__}: {e})",
                    file=str(folder),
                    field="(row)",
                ) from None
            yield key, check_row(row, str(folder), key)


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


#: The source folder of Melting Pot clips in a packed repository (one config per game).
SOURCE = "meltingpot"


def pack_lmdb(src: str | Path, out: str | Path, rows_per_shard: int = 500, name: str = "meltingpot") -> dict:
    """Every ``<src>/<game>/`` LMDB as WebDataset shards ``<out>/webdataset/meltingpot/<game>/train-NNNNNN.tar``
    plus ``<out>/README.md``; written beside ``out`` and renamed into place. Returns rows per game."""
    import shutil

    src, out = Path(src), Path(out)
    games = sorted(p.name for p in src.iterdir() if (p / "data.mdb").is_file()) if src.is_dir() else []
    if not games:
        raise AtariDataError("holds no <game>/data.mdb folders", file=str(src))
    tmp = out.with_name(f".{out.name}.partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    counts = {}
    for game in games:
        (tmp / repo.tar_dir(SOURCE, game)).mkdir(parents=True)
        n, tar = 0, None
        for key, row in read_lmdb(src / game):
            if n % rows_per_shard == 0:
                if tar is not None:
                    tar.close()
                tar = tarfile.open(
                    tmp / repo.tar_file(SOURCE, game, "train", n // rows_per_shard), "w", format=tarfile.USTAR_FORMAT
                )
            assert tar is not None
            sample = f"{game}-{n:06d}"
            _add(
                tar,
                f"{sample}.json",
                json.dumps(
                    {"game": game, "lmdb_key": key, "num_players": row["num_players"], "prompt": row["prompt"]}
                ).encode(),
            )
            for field in ARRAYS:
                _add(tar, f"{sample}.{field}.npy", _npy(row[field]))
            n += 1
        if tar is not None:
            tar.close()
        counts[game] = n
    _write_card(tmp / repo.CARD, name, counts)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return counts


def _write_card(path: Path, name: str, counts: dict) -> None:
    import yaml

    header = {
        "pretty_name": name,
        "tags": ["melting-pot", "world-model", "webdataset"],
        "configs": [
            {"config_name": g, "data_files": [{"split": "train", "path": repo.tar_pattern(SOURCE, "train", g)}]}
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
    path.write_text("---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n\n" + body)
