"""The shards' tar walk (atari_data.publish.tar): what any tar tool writes reads the same, what it
writes any tar tool reads, and a broken or hostile shard is one clear error, never a hang or a
gigabyte allocation."""

from __future__ import annotations

import io
import tarfile

import pytest

from atari_data.errors import AtariDataError
from atari_data.publish.tar import BLOCK, TarWriter, _pax_record, header, members


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
    rid = "expert-Pong-e000000-s000000"
    rec = b'{"id":"%s","label":"A","question":"{}","provenance":"{}"}' % rid.encode()
    foreign = _tarfile_bytes([("__meta__", b"skipped"), (f"{rid}.json", rec), (f"{rid}.png", encode_png(frame))])
    (tmp_path / "foreign.tar").write_bytes(foreign)
    (got,) = list(records([str(tmp_path / "foreign.tar")], split=False))
    assert got["label"] == "A" and np.array_equal(got["image"], frame)
    (tmp_path / "cut.tar").write_bytes(foreign[: 5 * BLOCK + 10])  # inside the PNG (tarfile pads the rest)
    with pytest.raises(AtariDataError, match="cut.tar: .*ends inside member"):
        list(records([str(tmp_path / "cut.tar")], split=False))


def _fix_sum(h: bytes) -> bytes:
    h = h[:148] + b" " * 8 + h[156:]
    return h[:148] + b"%06o\0 " % sum(h[:BLOCK]) + h[156:]


@pytest.mark.parametrize(
    "field,message",
    [
        (b"-0000001000\0", "no octal size"),  # int(..., 8) would take the sign: -512 passes any limit
        (b"+0000001000\0", "no octal size"),
        (b"\xff" * 12, "no octal size"),  # base-256, negative
    ],
)
def test_a_size_that_is_not_octal_digits_is_refused_before_anything_is_read(field, message):
    bad = _fix_sum(header("a.png", 0)[:124] + field + header("a.png", 0)[136:])
    rest = _one("b.json", b"{}")
    with pytest.raises(AtariDataError, match=message):
        _read(bad + rest)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda h: h[:148] + b"garbage!" + h[156:],  # no number at all
        lambda h: h[:148] + b"%06o\0 " % (int(h[148:154], 8) + 65521) + h[156:],  # right modulo 65521 only
    ],
)
def test_a_checksum_is_checked_exactly(mangle):
    good = _one("r.json", b"{}")
    with pytest.raises(AtariDataError, match="fails its checksum"):
        _read(mangle(good[:BLOCK]) + good[BLOCK:])


@pytest.mark.parametrize("fill", [0x00, 0x7F, 0x80, 0xFF, None])
def test_the_header_sum_is_exact_at_its_extremes(fill):
    """The checksum's byte sum is taken from Adler-32 over each half of the header, which is exact
    only while a half sums below 65,521: all 0xFF (65,280 a half) is the worst case."""
    import random

    from atari_data.publish.tar import _byte_sum

    h = bytes(random.Random(0).randbytes(BLOCK)) if fill is None else bytes([fill]) * BLOCK
    assert _byte_sum(h) == sum(h)


def test_a_shard_must_end_with_its_end_block_and_nothing_after_it():
    whole = _one("a.json", b"{}")[: -2 * BLOCK] + _one("b.json", b"[]")
    assert _read(whole) == [("a.json", b"{}"), ("b.json", b"[]")]
    with pytest.raises(AtariDataError, match="ends without its end-of-archive block at byte 0"):
        _read(b"")  # an empty file, as webdataset's tarfile refuses it
    with pytest.raises(AtariDataError, match="ends without its end-of-archive block at byte 1,024"):
        _read(whole[: 2 * BLOCK])  # cut at a member's edge: one sample fewer, said out loud
    zeroed = whole[: BLOCK * 2] + bytes(BLOCK) + whole[BLOCK * 3 :]  # b.json's header wiped
    with pytest.raises(AtariDataError, match="data after a zero block at byte 1,024"):
        _read(zeroed)


def test_pax_size_and_path_names_and_odd_bytes_read_as_tarfile_reads_them():
    pax = _pax_record(b"size", b"1024") + _pax_record(b"path", b"big\nx.png")  # LEN counts a newline too
    assert pax == b"13 size=1024\n18 path=big\nx.png\n"
    data = header(".pax", len(pax), b"x") + pax + bytes(-len(pax) % BLOCK)
    data += header("big.png", 0) + bytes(1024) + _one("b.json", b"{}")
    assert _read(data) == [("big\nx.png", bytes(1024)), ("b.json", b"{}")]
    broken = header(".pax", 9, b"x") + b"99 path=a" + bytes(BLOCK - 9) + _one()
    with pytest.raises(AtariDataError, match="pax header .* malformed"):
        _read(broken)
    # Names that are not UTF-8 stay apart; a sparse member is refused, not skipped.
    two = _tarfile_bytes([("\udcffa.json", b"1"), ("\udcfea.json", b"2")], tarfile.GNU_FORMAT)
    assert [n for n, _ in _read(two)] == ["\udcffa.json", "\udcfea.json"]
    sparse = _fix_sum(header("s.png", 0)[:156] + b"S" + header("s.png", 0)[157:]) + bytes(2 * BLOCK)
    with pytest.raises(AtariDataError, match="type b'S'"):
        _read(sparse)


def test_a_gzipped_shard_reads_through_gzip():
    import gzip

    plain = _one("a.json", b"{}")
    assert _read(gzip.compress(plain)) == _read(plain) == [("a.json", b"{}")]


def test_the_writer_carries_long_names_in_pax_and_refuses_what_ustar_cannot_hold(tmp_path):
    long = "expert2f-Pong-e000001-s000002." + "a_very_long_side_image_name_from_provenance" * 3 + ".png"
    w = TarWriter(tmp_path / "s.tar")
    w.add(long, b"x" * 700)
    w.close()
    with tarfile.open(tmp_path / "s.tar") as tf:
        assert [(m.name, tf.extractfile(m).read()) for m in tf] == [(long, b"x" * 700)]
    assert _read((tmp_path / "s.tar").read_bytes()) == [(long, b"x" * 700)]
    with pytest.raises(ValueError, match="NUL"):
        TarWriter(tmp_path / "t.tar").add("a\0b.png", b"")
    with pytest.raises(ValueError, match="over ustar's 8 GB"):
        header("big.png", 8 << 30)


def test_the_helper_groups_like_webdataset_and_keeps_big_integers_exact(tmp_path):
    import numpy as np
    from webdataset.tariterators import base_plus_ext

    from atari_data.layout.png import encode_png
    from atari_data.publish.shards import records

    rec = b'{"id":"a","label":0,"provenance":"{\\"n\\": 18446744073709551616}"}'
    names = ["._a.json", "a.json", "._a.png", ".png", "dir.x/.json", "a.png"]
    assert [base_plus_ext(n)[0] for n in names] == [None, "a", None, None, None, "a"]
    data = {"a.json": rec, "a.png": encode_png(np.zeros((2, 2), np.uint8))}
    (tmp_path / "s.tar").write_bytes(_tarfile_bytes([(n, data.get(n, b"junk")) for n in names]))
    (got,) = list(records([str(tmp_path / "s.tar")], split=False))
    assert got["__key__"] == "a" and got["provenance"]["n"] == 2**64  # an int, not 1.8e19
    (tmp_path / "n.tar").write_bytes(_tarfile_bytes([("b.png", b"x")]))
    with pytest.raises(AtariDataError, match="n.tar: sample 'b' has no .json member"):
        list(records([str(tmp_path / "n.tar")], split=False))
