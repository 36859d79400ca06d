"""`atari-data doctor` for a repository of re-sharded Melting Pot clips (`atari-data pack-lmdb`):
every shard a tar of plain top-level files, every sample its json and arrays, every array loadable
without pickle and within the schema, and the card's counts right."""

from __future__ import annotations

import io
import math
import tarfile

import numpy as np

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.layout import parse_json_line
from atari_data.layout.validate import REPEATED, repeated_key
from atari_data.meltingpot.lmdb import ARRAYS, check_row
from atari_data.publish import repo


def check_lmdb_pack(doctor, games: dict) -> None:
    """Add to ``doctor`` (an :class:`atari_data.publish.doctor.Doctor`) every defect of the clips."""
    if not isinstance(games, dict) or not all(
        isinstance(g, str) and repo.SAFE_NAME_RE.match(g) and type(n) is int for g, n in games.items()
    ):
        doctor.defect(doctor.folder / repo.CARD, "lmdb_pack.games", "is not a mapping of game names to row counts")
        return
    listed = {g: sorted(doctor.folder.glob(repo.tar_pattern(repo.LMDB_SOURCE, "train", g))) for g in games}
    mine = {t for shards in listed.values() for t in shards}
    folder = doctor.folder / repo.WEBDATASET
    for path in sorted(folder.rglob("*")) if folder.is_dir() else []:  # publish uploads every one
        if (path.is_file() or path.is_symlink()) and path not in mine:
            doctor.defect(path, "(file)", "belongs to no game in the card")
    for game, stated in games.items():
        n = 0
        for t in listed[game]:
            try:
                with tarfile.open(t) as tf:
                    samples: dict[str, dict] = {}
                    seen: set[str] = set()
                    for m in tf:
                        if not m.isfile() or "/" in m.name or m.name.startswith(".."):
                            doctor.defect(t, m.name, "is not a plain file at the top of the shard")
                            continue
                        if m.name in seen:  # readers keep the first or the last: the sample is not one thing
                            doctor.defect(t, m.name, "is given twice in the shard")
                            continue
                        seen.add(m.name)
                        key, ext = repo.split_member(m.name)
                        if ext == "json" and m.size > limits.limit("record"):  # fields and a prompt: small
                            doctor.defect(
                                t,
                                m.name,
                                f"declares {m.size:,} bytes, over the record limit of {limits.limit('record'):,}",
                            )
                            continue
                        if m.size > limits.limit("member"):
                            doctor.defect(
                                t,
                                m.name,
                                f"declares {m.size:,} bytes, over the member limit of "
                                f"{limits.limit('member') // limits.MB:,} MB",
                            )
                            continue
                        data = tf.extractfile(m).read()  # type: ignore[union-attr]  # m.isfile()
                        if ext == "json":
                            value = parse_json_line(data, f"{t}!{m.name}", 1, "(member)")
                            if not isinstance(value, dict):
                                raise ValueError(f"{m.name} is not a JSON object")
                            if twice := repeated_key(data):
                                doctor.defect(t, f"{m.name}: {twice}", REPEATED)
                                continue
                            samples.setdefault(key, {}).update(value)
                        elif ext.endswith(".npy") and ext[:-4] in ARRAYS:
                            samples.setdefault(key, {})[ext[:-4]] = load_npy(data, m.name)
                        else:
                            doctor.defect(t, m.name, "is a stray member")
                    for key, sample in samples.items():
                        row = {k: sample.get(k) for k in (*ARRAYS, "num_players", "prompt")}
                        try:
                            check_row(row, str(t), key)
                        except AtariDataError as e:
                            doctor.defects.append(e)
                    n += len(samples)
            except AtariDataError as e:
                doctor.defects.append(e)
            except (tarfile.TarError, OSError, ValueError, EOFError) as e:
                doctor.defect(t, "(file)", f"is not a readable shard ({type(e).__name__}: {e})")
        doctor.counts[game] = n
        if n != stated:
            doctor.defect(doctor.folder / repo.CARD, f"lmdb_pack.games.{game}", f"says {stated}, the shards hold {n}")


def load_npy(data: bytes, name: str) -> np.ndarray:
    """A ``.npy`` member, its header's shape held to the bytes it brought before anything is allocated:
    numpy allocates what a header declares before it reads (200 bytes declaring a petabyte were a
    MemoryError). A ValueError names what is wrong."""
    f = io.BytesIO(data)
    version = np.lib.format.read_magic(f)
    read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read_header(f)
    declared = math.prod(shape) * dtype.itemsize
    held = len(data) - f.tell()
    if declared != held:
        raise ValueError(f"{name} declares {shape} of {dtype} ({declared:,} bytes) and holds {held:,}")
    return np.load(io.BytesIO(data), allow_pickle=False)
