"""The tar files of WebDataset shards, written and read without :mod:`tarfile`.

tarfile builds a ``TarInfo`` object per member and parses every header field: reading a shard
through webdataset cost 80-90 µs a two-frame sample (three members), more than inflating its
frame; the walk here costs about 10 (``tools/bench/record.py``). What it does instead:

- **Writing**: one plain ustar header per member, with fixed metadata (mtime 0, mode 0644, no
  owner), so the same samples always give the same bytes; names over 100 bytes are refused
  (record ids are far shorter); two zero blocks end the archive. Any tar reader reads the result.
- **Reading**: every header's checksum is checked and every member's declared size is checked
  against the ``member`` limit before it is read, so a corrupt or hostile shard costs one line,
  never unbounded memory. Regular files are yielded; pax and GNU long-name headers rename the
  member after them; directories, links and devices are skipped, as webdataset skips them.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from atari_data.errors import AtariDataError
from atari_data.limits import check, limit

BLOCK = 512
_END = bytes(2 * BLOCK)
_ZERO = bytes(BLOCK)
_REGULAR = (b"0", b"\0", b"7")  # a file (7: contiguous, read as one)


def header(name: str, size: int) -> bytes:
    """The ustar header of a regular file ``name`` of ``size`` bytes, with fixed metadata."""
    raw = name.encode()
    if len(raw) > 100 or not raw:
        raise ValueError(f"tar member name {name!r} is empty or over 100 bytes")
    h = bytearray(BLOCK)
    h[0 : len(raw)] = raw
    h[100:108] = b"0000644\0"  # mode
    h[108:116] = b"0000000\0"  # uid
    h[116:124] = b"0000000\0"  # gid
    h[124:136] = b"%011o\0" % size
    h[136:148] = b"00000000000\0"  # mtime
    h[148:156] = b" " * 8  # the checksum counts its own field as spaces
    h[156:157] = b"0"
    h[257:265] = b"ustar\x0000"
    h[148:156] = b"%06o\0 " % sum(h)
    return bytes(h)


class TarWriter:
    """Members appended to one tar file, closed with the end-of-archive blocks."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "wb")
        self.size = 0

    def add(self, name: str, data: bytes) -> None:
        pad = -len(data) % BLOCK
        self.file.write(header(name, len(data)) + data + _ZERO[:pad])
        self.size += BLOCK + len(data) + pad

    def close(self) -> None:
        self.file.write(_END)
        self.file.close()


def members(stream, url: str) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each regular file in a tar stream, in order; AtariDataError naming the
    shard and member when a header is corrupt, a size is over the limit or the stream ends early."""
    read = stream.read
    rename: str | None = None  # from a pax or GNU long-name header, for the member after it
    cap = limit("member")
    at = 0  # the offset of the header being read, for messages
    while True:
        h = read(BLOCK)
        if not h or h == _ZERO:
            return
        if len(h) < BLOCK:
            raise AtariDataError(f"the tar file ends inside a header at byte {at:,}", file=url)
        _check_sum(h, url, at)
        name = rename or _name(h)
        size = _size(h, url, at)
        if size > cap:
            check("member", size, file=url, field=name)  # raises, saying which limit to raise
        data = read(size)
        pad = -size % BLOCK
        if len(data) < size or (pad and len(read(pad)) < pad):
            raise AtariDataError(f"the tar file ends inside member {name!r} at byte {at:,}", file=url)
        at += BLOCK + size + pad
        kind, rename = h[156:157], None
        if kind == b"x":
            rename = _pax_path(data)
        elif kind == b"L":
            rename = data.split(b"\0", 1)[0].decode("utf-8", "replace")
        elif kind in _REGULAR:
            yield name, data


def _name(h: bytes) -> str:
    name = h[:100].split(b"\0", 1)[0]
    if h[257:262] == b"ustar" and h[345] != 0:  # ustar keeps a long path's directories apart
        name = h[345:500].split(b"\0", 1)[0] + b"/" + name
    return name.decode("utf-8", "replace")


def _size(h: bytes, url: str, at: int) -> int:
    field = h[124:136]
    if field[0] & 0x80:  # GNU base-256, for sizes over 8 GB: always over the member limit
        return int.from_bytes(field[1:], "big")
    try:
        return int(field.split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        raise AtariDataError(f"the tar header at byte {at:,} has no octal size ({field!r})", file=url) from None


def _check_sum(h: bytes, url: str, at: int) -> None:
    try:
        declared = int(h[148:156].split(b"\0", 1)[0].strip(), 8)
    except ValueError:
        declared = -1
    # First modulo 65521, by zlib's adler32 (its low half is 1 + the bytes' sum mod 65521), which
    # sums in C at a tenth of sum()'s cost; only a declared sum off by a multiple of 65521 passes
    # it wrongly, and a forger gains nothing by that a correct checksum would not give.
    field = sum(h[148:156])
    if (declared - (zlib.adler32(h) & 0xFFFF) + 1 + field - 8 * 32) % 65521 == 0:
        return
    if declared != sum(h) - field + 8 * 32 and declared != _signed_sum(h):
        raise AtariDataError(f"the tar header at byte {at:,} fails its checksum (corrupt file?)", file=url)


def _signed_sum(h: bytes) -> int:
    # Some old tars summed the header as signed bytes; tarfile accepts either, and so does this.
    return sum(b - 256 if b >= 128 else b for b in h[:148] + b" " * 8 + h[156:])


def _pax_path(data: bytes) -> str | None:
    """The ``path`` a pax extended header gives the next member, if any ("LEN key=value\\n" records)."""
    for record in data.split(b"\n"):
        _, _, kv = record.partition(b" ")
        key, eq, value = kv.partition(b"=")
        if eq and key == b"path":
            return value.decode("utf-8", "replace")
    return None
