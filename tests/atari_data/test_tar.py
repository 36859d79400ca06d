"""The shards' tar walk (atari_data.publish.tar): what any tar tool writes reads the same, what it
writes any tar tool reads, and a broken or hostile shard is one clear error, never a hang or a
gigabyte allocation."""

from __future__ import annotations

import io
import tarfile

import pytest

from atari_data.errors import AtariDataError
from atari_data.publish.tar import BLOCK, TarWriter, header, members


def _tarfile_bytes(entries, fmt=tarfile.PAX_FORMAT) -> bytes:
    """An archive written by Python's tarfile: (name, data) files, or (name, tarfile type, None)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tf:
        for name, what, *other in entries:
            info = tarfile.TarInfo(name)
            if other:
                info.type = what
                info.linkname = "elsewhere" if what == tarfile.SYMTYPE else ""
                tf.addfile(info)
            else:
                info.size = len(what)
                tf.addfile(info, io.BytesIO(what))
    return out.getvalue()


def _read(data: bytes, url: str = "shard.tar"):
    return list(members(io.BytesIO(data), url))


def test_what_tarfile_writes_reads_the_same_long_names_included():
    long_dir = "d" * 120 + "/sample.png"  # ustar splits it into prefix and name
    very_long = "k" * 150 + ".json"  # no '/': pax (or GNU) carries the whole name
    files = [("a.json", b"{}"), ("a.png", bytes(range(256)) * 3), (long_dir, b"x" * 513), (very_long, b"")]
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        assert _read(_tarfile_bytes(files, fmt)) == files
    # A directory, a symlink and a fifo are skipped, as webdataset skips them.
    odd = [("dir", tarfile.DIRTYPE, None), ("link", tarfile.SYMTYPE, None), ("fifo", tarfile.FIFOTYPE, None)]
    odd.append(("b.json", b"1"))
    assert _read(_tarfile_bytes(odd)) == [("b.json", b"1")]
    # A signed-sum header (old Sun tars) passes, as tarfile passes it.
    ustar = _tarfile_bytes([("\u00e9t\u00e9.json", b"{}")], tarfile.USTAR_FORMAT)
    signed = sum(b - 256 if b >= 128 else b for b in ustar[:148] + b" " * 8 + ustar[156:BLOCK])
    resigned = ustar[:148] + b"%06o\0 " % (signed & 0o777777) + ustar[156:]
    assert signed >= 0 and _read(resigned) == [("\u00e9t\u00e9.json", b"{}")]


def test_what_the_writer_writes_tarfile_reads_with_fixed_metadata(tmp_path):
    files = [("s-000001.json", b'{"a":1}'), ("s-000001.png", b"\x89PNG" * 200), ("s-000001.prev.png", b"")]
    for path in (tmp_path / "a.tar", tmp_path / "b.tar"):
        w = TarWriter(path)
        for name, data in files:
            w.add(name, data)
        w.close()
        assert w.size == sum(BLOCK + -(-len(d) // BLOCK) * BLOCK for _, d in files)
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tf:
        got = [(m.name, tf.extractfile(m).read(), m.mtime, m.mode, m.uname, m.isfile()) for m in tf]
    assert got == [(n, d, 0, 0o644, "", True) for n, d in files]
    assert _read((tmp_path / "a.tar").read_bytes()) == files
    with pytest.raises(ValueError, match="over 100 bytes"):
        header("x" * 101, 0)


def _one(name: str = "r.json", data: bytes = b"{}") -> bytes:
    return header(name, len(data)) + data + bytes(-len(data) % BLOCK) + bytes(2 * BLOCK)


@pytest.mark.parametrize(
    "mangle,message",
    [
        (lambda t: t[:300], "ends inside a header at byte 0"),
        (lambda t: t[: BLOCK + 1], "ends inside member 'r.json'"),
        (lambda t: t[:7] + b"X" + t[8:], "fails its checksum"),
        (lambda t: t[:124] + b"zzzzzzzzzzz\0" + t[136:], "fails its checksum"),
        (lambda t: _one()[: -2 * BLOCK] + t[:BLOCK], "'r.json' at byte 1,024"),  # a whole header, no data
    ],
)
def test_a_broken_shard_is_one_error_naming_the_shard(mangle, message):
    with pytest.raises(AtariDataError, match=message) as e:
        _read(mangle(_one(data=b"x" * 600)), url="shards/train-000003.tar")
    assert str(e.value).startswith("shards/train-000003.tar: ") and "\n" not in str(e.value)


def test_a_member_declaring_more_than_the_limit_is_refused_before_it_is_read(monkeypatch):
    huge = bytearray(header("bomb.png", 0))
    huge[124:136] = b"%011o\0" % (20 << 30)  # 20 GB declared, nothing behind it
    huge[148:156] = b" " * 8
    huge[148:156] = b"%06o\0 " % sum(huge)
    with pytest.raises(AtariDataError, match="over the member limit") as e:
        _read(bytes(huge) + bytes(BLOCK))
    assert "bomb.png" in str(e.value)
    monkeypatch.setenv("ATARI_DATA_LIMITS", "member=1")  # the limit is the user's to raise or lower
    with pytest.raises(AtariDataError, match="member limit of 1 MB"):
        _read(_one(data=bytes((1 << 20) + 1)))


def test_the_helper_reports_a_truncated_shard_and_reads_a_foreign_one(tmp_path):
    import numpy as np

    from atari_data.layout.png import encode_png
    from atari_data.publish.shards import records

    frame = np.arange(210 * 160 * 3, dtype=np.uint8).reshape(210, 160, 3)
    rec = b'{"id":"expert-Pong-e000000-s000000","label":"A","question":"{}","provenance":"{}"}'
    foreign = _tarfile_bytes([("__meta__", b"skipped"), ("x.json", rec), ("x.png", encode_png(frame))])
    (tmp_path / "foreign.tar").write_bytes(foreign)
    (got,) = list(records([str(tmp_path / "foreign.tar")], split=False))
    assert got["label"] == "A" and np.array_equal(got["image"], frame)
    (tmp_path / "cut.tar").write_bytes(foreign[: 5 * BLOCK + 10])  # inside the PNG (tarfile pads the rest)
    with pytest.raises(AtariDataError, match="cut.tar: .*ends inside member"):
        list(records([str(tmp_path / "cut.tar")], split=False))
