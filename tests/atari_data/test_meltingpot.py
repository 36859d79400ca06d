"""Melting Pot LMDBs written here with the lmdb package in the guide's schema: read safely,
checked, loaded with the guide's padding, re-sharded, and checked again by doctor."""

import os
import pickle

import lmdb
import numpy as np
import pytest

from atari_data.cli import main
from atari_data.errors import AtariDataError
from atari_data.meltingpot.lmdb import load_sample, pack_lmdb, read_lmdb, safe_loads
from atari_data.publish.doctor import Doctor


def clip(rng, players=2, t_lat=5, t_act=16, hw=8):
    return {
        "video_latents": rng.standard_normal((t_lat, 16, hw, hw)).astype(np.float16),
        "actions": rng.integers(0, 8, (players, t_act)).astype(np.int64),
        "frame_coords": rng.uniform(0, 512, (t_lat, players, 2)).astype(np.float32),
        "orientations": rng.integers(0, 4, (t_lat, players)).astype(np.int64),
        "initial_positions": rng.uniform(0, 512, (players, 2)).astype(np.float32),
        "num_players": players,
        "prompt": "coins",
    }


def write_lmdb(folder, values):
    folder.mkdir(parents=True)
    env = lmdb.open(str(folder), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, v in enumerate(values):
            txn.put(f"{i:08d}".encode(), v if isinstance(v, bytes) else pickle.dumps(v))
    env.close()


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned > pwned.txt",))


@pytest.fixture
def src(tmp_path):
    rng = np.random.default_rng(0)
    write_lmdb(tmp_path / "src" / "coins", [clip(rng) for _ in range(3)])
    write_lmdb(tmp_path / "src" / "clean_up", [clip(rng, players=3) for _ in range(2)])
    return tmp_path / "src"


def test_rows_round_trip_through_the_safe_unpickler(src):
    rows = list(read_lmdb(src / "coins"))
    assert [k for k, _ in rows] == [f"{i:08d}".encode().hex() for i in range(3)]
    assert rows[0][1]["video_latents"].dtype == np.float16 and rows[0][1]["num_players"] == 2


def test_a_malicious_pickle_is_refused_with_its_key(tmp_path):
    write_lmdb(tmp_path / "bad", [pickle.dumps({"x": Exploit()})])
    with pytest.raises(AtariDataError, match="row 3030303030303030: not loadable without running code.*posix.system"):
        list(read_lmdb(tmp_path / "bad"))
    assert not (tmp_path / "pwned.txt").exists() and not os.path.exists("pwned.txt")
    with pytest.raises(pickle.UnpicklingError):
        safe_loads(pickle.dumps(Exploit()))


def test_a_pickled_row_that_sets_a_key_twice_is_refused(tmp_path):
    """A pickle may set a dict's key twice (the last value won: a prompt no reader of the source saw
    first); Python's pickler never writes one."""
    row = clip(np.random.default_rng(0))
    row["promp2"] = "evil"
    data = pickle.dumps(row).replace(b"promp2", b"prompt")
    assert data.count(b"prompt") == 2
    write_lmdb(tmp_path / "twice", [data])
    with pytest.raises(AtariDataError, match="row 3030303030303030: .*'prompt' given twice"):
        list(read_lmdb(tmp_path / "twice"))


@pytest.mark.parametrize(
    "change,field",
    [
        (lambda r: r.pop("prompt"), "prompt"),
        (lambda r: r.update(actions=r["actions"].astype(np.int32)), "actions"),
        (lambda r: r.update(frame_coords=r["frame_coords"][:, :1]), "frame_coords"),
        (lambda r: r.update(num_players=5), "num_players"),
    ],
)
def test_rows_off_the_schema_are_one_line_errors(tmp_path, change, field):
    row = clip(np.random.default_rng(1))
    change(row)
    write_lmdb(tmp_path / "g", [row])
    with pytest.raises(AtariDataError) as e:
        list(read_lmdb(tmp_path / "g"))
    assert e.value.field == field and "row 3030303030303030" in e.value.render()


def test_loader_pads_subjects_and_normalises_coordinates(src):
    _, row = next(read_lmdb(src / "coins"))
    s = load_sample(row, subjects=4, canvas_size=512)
    assert s["actions"].shape == (4, 16) and (s["actions"][2:] == 0).all()
    assert s["subject_mask"].tolist() == [True, True, False, False]
    assert np.allclose(s["frame_coords"][:, :2], row["frame_coords"] / 512) and s["frame_coords"].max() <= 1


def test_pack_lmdb_then_doctor(src, tmp_path, capsys):
    out = tmp_path / "packed"
    assert main(["pack-lmdb", str(src), str(out), "--rows-per-shard", "2"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert sorted(p.name for p in (out / "webdataset" / "meltingpot" / "coins").iterdir()) == [
        "train-000000.tar",
        "train-000001.tar",
    ]
    doctor = Doctor(out).run()
    assert not doctor.defects and doctor.counts == {"clean_up": 2, "coins": 3}
    assert main(["publish", str(out), "--repo", "me/meltingpot", "--dry-run"]) == 0, "publishable, as it says"
    assert "train-000001.tar" in capsys.readouterr().out
    assert pack_lmdb(src, tmp_path / "again", rows_per_shard=2) == {"clean_up": 2, "coins": 3}
    assert (out / "webdataset" / "meltingpot" / "coins" / "train-000000.tar").read_bytes() == (
        tmp_path / "again" / "webdataset" / "meltingpot" / "coins" / "train-000000.tar"
    ).read_bytes(), "deterministic"
    card = (out / "README.md").read_text().replace("coins: 3", "coins: 4")
    (out / "README.md").write_text(card)
    assert any("says 4, the shards hold 3" in d.render() for d in Doctor(out).run().defects)


def test_a_game_name_with_a_dot_is_refused_before_it_is_packed(tmp_path, capsys):
    """WebDataset keys end at a member name's first dot: a game 'a.b' packed, then doctor found its
    samples stray and its shards empty (from an outside review)."""
    write_lmdb(tmp_path / "src" / "a.b", [clip(np.random.default_rng(0))])
    assert main(["pack-lmdb", str(tmp_path / "src"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'a.b' is not a game folder name" in err, err
    assert not (tmp_path / "out").exists()


def test_pack_lmdb_bad_source_is_a_one_line_error(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert main(["pack-lmdb", str(tmp_path / "empty"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no <game>/data.mdb folders" in err
    assert not (tmp_path / "out").exists()
    assert main(["pack-lmdb", str(tmp_path / "nowhere"), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nowhere: does not exist" in err, err


class _Call:
    """Pickles as a call of ``func(*args)``: what a hostile row can ask the unpickler to run."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _reconstruct():
    from numpy._core.multiarray import _reconstruct as f

    return f


@pytest.mark.parametrize(
    "field,value",
    [
        ("video_latents", lambda: _Call(np.ndarray, (1, 16, 64, 1024), "f2")),  # 2 MB uninitialised, any size alike
        ("video_latents", lambda: _Call(_reconstruct(), np.ndarray, (1, 16, 64, 1024), b"f2")),
        ("prompt", lambda: _Call(bytes, 64 << 20)),  # 64 MB of zeros from a few bytes
        ("prompt", lambda: _Call(bytearray, 64 << 20)),
        ("video_latents", lambda: np.full((5, 16, 8, 8), np.nan, np.float16)),
        ("frame_coords", lambda: np.full((5, 2, 2), np.inf, np.float32)),
        ("actions", lambda: np.full((2, 16), -7, np.int64)),
        ("orientations", lambda: np.full((5, 2), 9, np.int64)),
    ],
)
def test_hostile_rows_are_refused_with_their_key(tmp_path, capsys, field, value):
    """Rows that built arrays or bytes of any size from a few bytes (an uninitialised array could
    carry stale memory into a published dataset), or values off the schema, are refused."""
    row = clip(np.random.default_rng(2))
    row[field] = value()
    write_lmdb(tmp_path / "src" / "coins", [row])
    out = tmp_path / "out"
    assert main(["pack-lmdb", str(tmp_path / "src"), str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "row 3030303030303030" in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing left beside OUT"


@pytest.mark.parametrize("which", ["src", "inside src", "file", "symlink", "not packed", "rows 0", "rows -1"])
def test_pack_lmdb_refuses_an_out_it_may_not_replace(src, tmp_path, capsys, which):
    """OUT equal to the source or inside it replaced (deleted) the source LMDBs; a file or symlink
    OUT was a traceback; a folder that is not a packed repository was replaced without a word."""
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    out, argv = tmp_path / "out", []
    if which == "src":
        out = src
    elif which == "inside src":
        out = src / "coins"
    elif which == "file":
        out.write_text("precious")
    elif which == "symlink":
        (tmp_path / "elsewhere").mkdir()
        out.symlink_to(tmp_path / "elsewhere")
    elif which == "not packed":
        out.mkdir()
        (out / "notes.txt").write_text("precious")
    else:
        argv = ["--rows-per-shard", which.split()[1]]
    assert main(["pack-lmdb", str(src), str(out), *argv, "--force"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file()} == before
    assert not list(tmp_path.glob(".*partial")), "no staging folder left"
    if which in ("file", "not packed"):
        assert (out.read_text() if which == "file" else (out / "notes.txt").read_text()) == "precious"


def test_pack_lmdb_replaces_its_own_pack_only_with_force_and_one_at_a_time(src, tmp_path, capsys):
    from atari_data.layout import OutputLock

    out = tmp_path / "out"
    assert main(["pack-lmdb", str(src), str(out)]) == 0
    assert main(["pack-lmdb", str(src), str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    lock = OutputLock(out, str(out))  # another pack-lmdb into OUT, mid-way
    try:
        assert main(["pack-lmdb", str(src), str(out), "--force"]) == 2
        assert ".out.lock" in capsys.readouterr().err
    finally:
        lock.release()
    assert main(["pack-lmdb", str(src), str(out), "--force"]) == 0


def _raw(body: bytes) -> bytes:
    return b"\x80\x04" + body + b"."


def _scalar_of(n: int) -> bytes:
    """``numpy scalar(dtype('V<n>'))``: n zero bytes from a few, had scalar been allowed as numpy has it."""

    def s(text: str) -> bytes:
        return b"\x8c" + bytes([len(text)]) + text.encode()

    return (
        s("numpy._core.multiarray")
        + s("scalar")
        + b"\x93"
        + s("numpy")
        + s("dtype")
        + b"\x93"
        + s(f"V{n}")
        + b"\x85R\x85R"
    )


def _tampered_dtype(flags: int, metadata=None):
    """An int64 array whose dtype's pickled state carries other flags or metadata: equal to int64,
    but numpy's loops then fail on it."""
    from numpy._core.multiarray import _reconstruct as rebuild

    class Dtype:
        def __reduce__(self):
            return np.dtype, ("i8", False, True), (3, "<", None, None, None, -1, -1, flags, metadata)

    a = np.arange(32, dtype=np.int64).reshape(2, 16) % 5
    return _Reduced(rebuild, (np.ndarray, (0,), b"b"), (1, a.shape, Dtype(), False, a.tobytes()))


def _object_array(n: int):
    from numpy._core.multiarray import _reconstruct as rebuild

    return _Reduced(rebuild, (np.ndarray, (0,), b"b"), (1, (n,), np.dtype("O"), False, [5]))


def _over(base: np.ndarray):
    from numpy._core.numeric import _frombuffer

    return _Reduced(_frombuffer, (base, np.dtype("i8"), (2, 16), "C"), None)


class _Reduced:
    def __init__(self, func, args, state):
        self.r = (func, args, state)

    def __reduce__(self):
        return self.r


@pytest.mark.parametrize(
    "value,why",
    [
        (lambda: _raw(_scalar_of(64 << 20)), "refused numpy scalar"),  # 64 MB of zeros from 60 bytes
        (lambda: _raw(b"N\x94" + b"r" + (1 << 27).to_bytes(4, "little")), "memo index"),  # a 2 GB memo
        (lambda: _raw(b"(" + b"}" * 20_000 + b"l"), "opcodes"),  # 20 kB, 64x that once built
        (lambda: {**clip(np.random.default_rng(2)), "actions": _tampered_dtype(1)}, "refused dtype int64"),
        (lambda: {**clip(np.random.default_rng(2)), "actions": _tampered_dtype(4)}, "refused dtype int64"),
        (lambda: {**clip(np.random.default_rng(2)), "actions": _tampered_dtype(0, {"m": 1})}, "refused dtype int64"),
        (lambda: {**clip(np.random.default_rng(2)), 1: 2, "a": 3}, "unknown"),
        # an object array longer than its list: numpy read past the list (a crash at larger shapes)
        (lambda: {**clip(np.random.default_rng(2)), "actions": _object_array(4)}, "refused to build"),
        # a second array over the first's memory, which a later BUILD of the first would free
        (lambda: {**clip(np.random.default_rng(2)), "actions": _over(np.zeros(32, np.int64))}, "_frombuffer"),
        (lambda: clip(np.random.default_rng(2), t_lat=0, t_act=0), "no time steps"),
    ],
)
def test_rows_that_grow_or_break_numpy_are_one_line_errors(tmp_path, capfd, value, why):
    """A few bytes that would ask for memory of any size are refused before it is asked for; a
    dtype tampered with, keys of mixed types and a clip of no time steps are one line, not a
    traceback or a warning."""
    v = value()
    write_lmdb(tmp_path / "src" / "coins", [v if isinstance(v, bytes) else pickle.dumps(v, 4)])
    out = tmp_path / "out"
    assert main(["pack-lmdb", str(tmp_path / "src"), str(out)]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "row 3030303030303030" in err and why in err, err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing left beside OUT"


def test_a_truncated_lmdb_is_a_one_line_error_not_a_crash(src, tmp_path):
    """Reading a page past the end of a memory-mapped file is SIGBUS: checked before any read."""
    import subprocess
    import sys

    bad = tmp_path / "bad" / "coins"
    bad.mkdir(parents=True)
    (bad / "data.mdb").write_bytes((src / "coins" / "data.mdb").read_bytes()[:8192])
    out = tmp_path / "out"
    code = f"from atari_data.cli import main; raise SystemExit(main(['pack-lmdb', {str(bad.parent)!r}, {str(out)!r}]))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "shorter than" in run.stderr, run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "src"], "nothing left beside OUT"


def test_folders_without_an_lmdb_are_named_not_skipped_silently(src, tmp_path, caplog):
    """A game folder whose LMDB sits one level deeper, or was not copied, was left out unsaid."""
    (src / "harvest" / "nested").mkdir(parents=True)
    (src / ".cache").mkdir()  # hidden: not a game
    assert pack_lmdb(src, tmp_path / "out") == {"clean_up": 2, "coins": 3}
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == ["skipped 1 folder of SRC without data.mdb: harvest"], said


def rewritten_shard(src, tmp_path, change):
    """A pack of ``src`` whose first coins shard is written again with ``change(members)``, a list of
    (TarInfo, bytes) that it may edit; the pack's folder."""
    import io
    import tarfile

    out = tmp_path / "packed"
    pack_lmdb(src, out, rows_per_shard=2)
    shard = out / "webdataset" / "meltingpot" / "coins" / "train-000000.tar"
    with tarfile.open(shard) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf]
    members = change(members)
    with tarfile.open(shard, "w", format=tarfile.USTAR_FORMAT) as tf:
        for m, data in members:
            m.size = len(data)
            tf.addfile(m, io.BytesIO(data))
    return out


def test_a_shard_array_declaring_more_than_it_holds_is_a_defect_not_an_allocation(src, tmp_path):
    """A .npy member of 200 bytes whose header declares a petabyte: numpy allocates what the header
    says before it reads, so doctor ended in a MemoryError traceback."""
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': (1000000, 1000000, 250), }"
    header += " " * (117 - len(header)) + "\n"
    huge = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode() + bytes(64)

    def change(members):
        first = next(i for i, (m, _) in enumerate(members) if m.name.endswith(".npy"))
        members[first] = (members[first][0], huge)
        return members

    out = rewritten_shard(src, tmp_path, change)
    defects = [d.render() for d in Doctor(out).run().defects]
    assert any(".npy declares (1000000, 1000000, 250)" in d for d in defects), defects


@pytest.mark.parametrize("how", ["member twice", "key twice", "json past the record limit"])
def test_a_shard_sample_readers_would_read_otherwise_is_a_defect(src, tmp_path, how):
    """A sample's json given twice, a key given twice within it, or 80 MB of padding beside its
    fields: doctor called each healthy (the last member or key won, and the padding was read whole)."""
    import copy

    def change(members):
        i = next(i for i, (m, _) in enumerate(members) if m.name.endswith(".json"))
        m, data = members[i]
        if how == "member twice":
            members.insert(i + 1, (copy.copy(m), data.replace(b'"prompt"', b'"prompt":"evil","x"')))
        elif how == "key twice":
            members[i] = (m, data.replace(b"{", b'{"num_players":9,', 1))
        else:
            members[i] = (m, data[:-1] + b',"pad":"' + b"x" * (2 * 2**20) + b'"}')
        return members

    out = rewritten_shard(src, tmp_path, change)
    said = {
        "member twice": "is given twice in the shard",
        "key twice": "is given twice",
        "json past the record limit": "over the record limit",
    }[how]
    defects = [d.render() for d in Doctor(out).run().defects]
    assert any(said in d for d in defects), defects


@pytest.mark.parametrize("how", ["unlisted game", "no games listed"])
def test_doctor_checks_every_shard_a_pack_would_publish(src, tmp_path, how):
    """doctor walked the card's games only: a shard of a game the card does not list, or every shard
    under a card listing no games, was healthy, and publish would upload it. (A stray top-level file
    is publish's to refuse, as for record packs: a Hub snapshot may hold its owner's files.)"""
    out = tmp_path / "packed"
    pack_lmdb(src, out, rows_per_shard=2)
    if how == "unlisted game":
        (out / "webdataset" / "meltingpot" / "evil").mkdir()
        (out / "webdataset" / "meltingpot" / "evil" / "train-000000.tar").write_bytes(b"not a tar")
        said = "belongs to no game in the card"
    else:
        card = out / "README.md"
        text = card.read_text()
        start = text.index("  games:")
        end = text.index("\n", text.index("coins:", start))
        card.write_text(text[:start] + "  games: {}" + text[end:])
        said = "belongs to no game in the card"
    defects = [d.render() for d in Doctor(out).run().defects]
    assert any(said in d for d in defects), defects


def test_a_game_without_clips_is_refused_not_packed_as_a_config_that_cannot_load(src, tmp_path, capsys):
    """An LMDB holding no rows became a card config whose pattern matched no file, which doctor
    called healthy and load_dataset failed on (IndexError)."""
    write_lmdb(src / "empty", [])
    out = tmp_path / "packed"
    assert main(["pack-lmdb", str(src), str(out)]) == 2
    err = capsys.readouterr().err
    assert "empty" in err and "holds no clips" in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.parametrize("as_overflow", [False, True])
def test_a_value_declared_past_the_end_of_the_file_is_a_one_line_error_not_a_crash(tmp_path, as_overflow):
    """From a hostile review: a 24 KB data.mdb whose one large value's node declares 20,000 bytes
    (it starts near the file's end) passed the page check, and copying the value read past the
    mapped file: SIGBUS, exit 135, nothing said, a .partial folder left beside OUT."""
    import subprocess
    import sys

    lmdb = pytest.importorskip("lmdb", reason="the lmdb extra reads Melting Pot's LMDBs")
    game = tmp_path / "src" / "coins"
    game.mkdir(parents=True)
    env = lmdb.open(str(game), map_size=1 << 22)
    with env.begin(write=True) as txn:
        txn.put(b"00000000", b"V" * 10_000)  # an overflow value: pages of its own, at the file's end
    env.close()
    data = bytearray((game / "data.mdb").read_bytes())
    at = data.index(b"00000000")  # the leaf node: its value size (two 16-bit halves) just before the key
    data[at - 8 : at - 4] = (20_000).to_bytes(2, "little") + (0).to_bytes(2, "little")
    if as_overflow:  # from an outside review: the leaf page also flagged an overflow run, which a scan
        page = at // 4096 * 4096  # of the file skipped with what it took for its page count; LMDB reads it
        data[page + 10] |= 0x04  # as a leaf all the same
    (game / "data.mdb").write_bytes(bytes(data))
    out = tmp_path / "out"
    code = f"from atari_data.cli import main; raise SystemExit(main(['pack-lmdb', {str(game.parent)!r}, {str(out)!r}]))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    said = "is no branch or leaf page" if as_overflow else "more than its overflow pages hold"
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and said in run.stderr, run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"], "nothing left beside OUT"


def test_an_lmdb_whose_freed_pages_hold_old_bytes_is_read_not_refused(tmp_path):
    """From an outside review: the check of large values read every page of the file, freed ones too,
    whose old bytes (a leaf pointing at a reused overflow page, the middle of an old value taken for
    a page) refused a valid environment of 60 transactions of puts and deletes as damaged. Only the
    live tree is read now."""
    import random

    lmdb = pytest.importorskip("lmdb", reason="the lmdb extra reads Melting Pot's LMDBs")
    from atari_data.meltingpot.lmdb import _large_values_problem

    folder = tmp_path / "coins"
    env = lmdb.open(str(folder), map_size=1 << 26)
    rng = random.Random(0)
    for _ in range(60):
        with env.begin(write=True) as txn:
            for _ in range(20):
                key = b"%08d" % rng.randrange(200)
                if rng.random() < 0.3:
                    txn.delete(key)
                else:
                    txn.put(key, rng.randbytes(rng.choice([100, 3000, 5000, 9000, 20000])))
    env.close()
    size = (folder / "data.mdb").stat().st_size
    assert _large_values_problem(folder / "data.mdb", 4096, size) is None
