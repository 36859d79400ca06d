"""The tar files of WebDataset shards, written and read without :mod:`tarfile`.

tarfile builds a ``TarInfo`` object per member and parses every header field: reading a shard
through webdataset cost 80-90 µs a two-frame sample (three members), more than inflating its
frame; the walk here costs about 15 (``tools/bench/record.py``). What it does instead:

- **Writing**: one ustar header per member with fixed metadata (mtime 0, mode 0644, no owner), so
  the same samples always give the same bytes; a name over 100 bytes goes in a pax ``path``
  record before it, as tarfile writes it; two zero blocks end the archive. Any tar reader reads
  the result.
- **Reading**: every header's checksum is checked exactly and every member's declared size (octal
  digits only, or a pax ``size``) against the ``member`` limit before it is read, so a corrupt or
  hostile shard costs one line, never unbounded memory. The archive must end with its end-of-archive
  block, and only zeros may follow it: a shard cut short at a member's edge is an error, not fewer
  samples. Regular files are yielded; pax and GNU long-name headers rename (and pax headers resize)
  the member after them; directories, links and devices are skipped, as webdataset skips them;
  sparse members, which would need reassembling, are refused. A gzip-compressed shard is inflated
  a megabyte at a time, refused once it inflates past the ``ratio`` limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from atari_data.errors import AtariDataError
from atari_data.limits import check, check_ratio, limit
from atari_data.publish.repo import RECORD_EXT
from laya_protocol.files import writing

BLOCK = 512
_END = bytes(2 * BLOCK)
_ZERO = bytes(BLOCK)
_REGULAR = (b"0", b"\0", b"7")  # a file (7: contiguous, read as one)
_SKIPPED = (b"1", b"2", b"3", b"4", b"5", b"6", b"g", b"V", b"M")  # links, devices, dirs, fifos, labels
_KINDS = {  # what a member that is not a file is, for the reader that refuses them (doctor)
    b"1": "a hard link",
    b"2": "a symbolic link",
    b"3": "a character device",
    b"4": "a block device",
    b"5": "a directory",
    b"6": "a FIFO",
    b"V": "a volume label",
    b"M": "a multi-volume continuation",
}
_HEADERS = (b"x", b"g", b"L", b"K")  # pax (per member and global) and GNU long-name headers
_PAX_PATH = "././@PaxHeader"
_MAX_SIZE = 8**11 - 1  # what 11 octal digits hold
_GZIP = b"\x1f\x8b"
RECORD_SUFFIX = f".{RECORD_EXT}"  # a record's JSON: held to the record limit, as a JSONL line is


def header(name: str, size: int, kind: bytes = b"0") -> bytes:
    """The ustar header of a member ``name`` of ``size`` bytes, with fixed metadata (no pax record:
    see :func:`member`)."""
    raw = name.encode()
    if not raw or len(raw) > 100 or b"\0" in raw:
        raise ValueError(f"tar member name {name!r} is empty, holds a NUL or is over 100 bytes")
    if not 0 <= size <= _MAX_SIZE:
        raise ValueError(f"tar member {name!r} of {size:,} bytes is over ustar's 8 GB")
    h = bytearray(_FIXED)
    h[0 : len(raw)] = raw
    h[124:136] = b"%011o\0" % size
    h[156:157] = kind
    h[148:156] = b"%06o\0 " % (_FIXED_SUM + sum(raw) + sum(h[124:136]) + kind[0])  # the sum of its bytes
    return bytes(h)


def _fixed() -> bytearray:
    """A header's bytes that never vary: mode 0644, no owner, mtime 0, the ustar magic, and the
    checksum field as spaces (the checksum counts its own field so)."""
    h = bytearray(BLOCK)
    h[100:108] = b"0000644\0"  # mode
    h[108:116] = b"0000000\0"  # uid
    h[116:124] = b"0000000\0"  # gid
    h[136:148] = b"00000000000\0"  # mtime
    h[148:156] = b" " * 8
    h[257:265] = b"ustar\x0000"
    return h


_FIXED = _fixed()
_FIXED_SUM = sum(_FIXED)


def member(name: str, data: bytes) -> bytes:
    """A whole member, padded to blocks; a name over 100 bytes travels in a pax record before it."""
    raw = name.encode()
    if b"\0" in raw:
        raise ValueError(f"tar member name {name!r} holds a NUL")
    out = b""
    if len(raw) > 100:
        body = _pax_record(b"path", raw)
        out = header(_PAX_PATH, len(body), b"x") + _padded(body)
        name = raw[:100].decode("utf-8", "ignore") or "_"  # what a reader without pax shows
    return out + header(name, len(data)) + _padded(data)


def _padded(data: bytes) -> bytes:
    return data + _ZERO[: -len(data) % BLOCK]


def _pax_record(key: bytes, value: bytes) -> bytes:
    """``"LEN key=value\\n"``, LEN counting the whole record, its own digits included."""
    rest = b" " + key + b"=" + value + b"\n"
    n = len(rest) + 1
    while len(str(n)) + len(rest) != n:
        n = len(str(n)) + len(rest)
    return str(n).encode() + rest


class TarWriter:
    """Members appended to one tar file, closed with the end-of-archive blocks."""

    def __init__(self, path: Path):
        self.path = path
        self.file = open(path, "wb")
        self.size = 0

    def add(self, name: str, data: bytes) -> None:
        block = member(name, data)
        with writing(self.path):
            self.file.write(block)
        self.size += len(block)

    def close(self) -> None:
        with writing(self.path):
            self.file.write(_END)
            self.file.close()


def members(stream, url: str, limited_as: str = "member", files_only: bool = False) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of each regular file in a tar stream, in order; AtariDataError naming the
    shard (and member) when a header is corrupt, a size is over the limit (of ``limited_as``, checked
    before a member is read) or the stream ends early. Links, devices and folders are skipped, as
    readers skip them, or with ``files_only`` refused."""
    h = stream.read(BLOCK)
    if h[:2] == _GZIP:  # webdataset reads gzip-compressed shards too; only they pay for the wrapper
        stream = _Gunzip(h, stream, url)
        h = stream.read(BLOCK)
    read = stream.read
    pax: dict[bytes, bytes] = {}  # from a pax header, for the member after it
    longname: str | None = None  # from a GNU long-name header, for the member after it
    cap, record_cap = limit(limited_as), limit("record")
    at = 0  # the offset of the header being read, for messages
    while True:
        if h == _ZERO:
            _check_end(read, url, at)
            return
        if len(h) < BLOCK:
            where = "ends without its end-of-archive block" if not h else "ends inside a header"
            raise AtariDataError(f"the tar file {where} at byte {at:,} (cut short?)", file=url)
        _check_sum(h, url, at)
        name = _text(pax[b"path"]) if b"path" in pax else longname or _name(h)
        size = _pax_size(pax, url, at) if b"size" in pax else _size(h, url, at)
        meta = h[156:157] in _HEADERS  # a pax or long-name header is read whole: held to a record's limit
        if size > cap or (size > record_cap and (meta or name.lower().endswith(RECORD_SUFFIX))):  # lower-cased
            check("record" if size <= cap else limited_as, size, file=url, field=name)  # raises, naming the limit
        data = read(size)
        pad = -size % BLOCK
        if len(data) < size or (pad and len(read(pad)) < pad):
            raise AtariDataError(f"the tar file ends inside member {name!r} at byte {at:,}", file=url)
        at += BLOCK + size + pad
        kind, pax, longname = h[156:157], {}, None
        if kind == b"x":
            pax = _pax(data, url, at)
        elif kind == b"L":
            longname = _text(data.split(b"\0", 1)[0])
        elif kind in _REGULAR:
            yield name, data
        elif files_only and kind in _KINDS:
            raise AtariDataError(f"is {_KINDS[kind]}: a packed shard holds plain files only", file=url, field=name)
        elif kind not in _SKIPPED:
            raise AtariDataError(f"member {name!r} has tar type {kind!r}, which is not read (a sparse file?)", file=url)
        h = read(BLOCK)


class _Gunzip:
    """The inflated bytes of a gzip stream (``first``, then the rest of ``stream``), read ``n`` at a
    time in bounded memory. A stream cut short, corrupt, followed by anything but zeros or another
    gzip member, or inflating past the ``ratio`` limit is one AtariDataError naming the shard
    (gzip.GzipFile raises EOFError, BadGzipFile or zlib.error and knows no limit)."""

    def __init__(self, first: bytes, stream, url: str):
        self.stream, self.url = stream, url
        self.pending, self.compressed, self.inflated = first, len(first), 0
        self.z = zlib.decompressobj(31)
        self.done = False

    def read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n and not self.done:
            if self.z.eof:
                self._next_member()
                continue
            data = self.z.unconsumed_tail or self.pending or self._more()
            self.pending = b""
            if not data:
                raise AtariDataError(
                    f"the gzip stream ends early at byte {self.compressed:,} (cut short?)", file=self.url
                )
            try:
                piece = self.z.decompress(data, min(n - len(out), 1 << 20))  # checked each MB
            except zlib.error as e:
                raise AtariDataError(
                    f"the gzip stream is corrupt before byte {self.compressed:,} ({e})", file=self.url
                ) from None
            out += piece
            self.inflated += len(piece)
            check_ratio(self.inflated, self.compressed, file=self.url, field="(gzip)")
        return bytes(out)

    def _more(self) -> bytes:
        data = self.stream.read(1 << 16)
        self.compressed += len(data)
        return data

    def _next_member(self) -> None:
        """After a member's end: another member, or zeros to the end (as gzip allows), or an error."""
        rest = self.z.unused_data
        while len(rest) < 2 and (more := self._more()):
            rest += more
        if rest[:2] == _GZIP:
            self.z, self.pending = zlib.decompressobj(31), rest
            return
        while rest:
            if rest.strip(b"\0"):
                at = self.compressed - len(rest.lstrip(b"\0"))
                raise AtariDataError(f"is not gzip data after byte {at:,} (trailing garbage?)", file=self.url)
            rest = self._more()
        self.done = True


def _check_end(read, url: str, at: int) -> None:
    """After the first zero block only zeros may follow (tarfile pads to 10 KB): a zeroed header
    amid members would otherwise end the shard early without a word."""
    while chunk := read(1 << 16):
        if chunk.strip(b"\0"):
            raise AtariDataError(f"the tar file has data after a zero block at byte {at:,} (corrupt?)", file=url)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # two different byte names stay two names


def _name(h: bytes) -> str:
    name = h[:100].split(b"\0", 1)[0]
    if h[257:262] == b"ustar" and h[345] != 0:  # ustar keeps a long path's directories apart
        name = h[345:500].split(b"\0", 1)[0] + b"/" + name
    return _text(name)


def _octal(field: bytes) -> int | None:
    digits = field.split(b"\0", 1)[0].strip(b" ")
    if not digits.isdigit():  # no sign, space or underscore, which int() would take
        return None
    try:
        return int(digits, 8)
    except ValueError:  # an 8 or a 9
        return None


def _size(h: bytes, url: str, at: int) -> int:
    field = h[124:136]
    if field[0] == 0x80:  # GNU base-256, positive, for sizes over 8 GB: always over the member limit
        return int.from_bytes(field[1:], "big")
    size = _octal(field)
    if size is None:
        raise AtariDataError(f"the tar header at byte {at:,} has no octal size ({field!r})", file=url)
    return size


def _pax_size(pax: dict[bytes, bytes], url: str, at: int) -> int:
    digits = pax[b"size"]
    if not digits.isdigit():
        raise AtariDataError(f"the pax header before byte {at:,} gives size {digits[:40]!r}", file=url)
    if len(digits) > 18:  # past any limit, and past what int() converts beyond 4,300 digits
        raise AtariDataError(
            f"the pax header before byte {at:,} gives a size of {len(digits):,} digits, over the member limit",
            file=url,
        )
    return int(digits)


def _check_sum(h: bytes, url: str, at: int) -> None:
    declared = _octal(h[148:156])
    # Unsigned, as ustar says; some old tars summed signed bytes, and tarfile accepts either.
    if declared is None or (declared != _byte_sum(h) - sum(h[148:156]) + 8 * 32 and declared != _signed_sum(h)):
        raise AtariDataError(f"the tar header at byte {at:,} fails its checksum (corrupt file?)", file=url)


def _byte_sum(h: bytes) -> int:
    """The sum of a header's 512 bytes, exactly, 5x faster than ``sum``: Adler-32's low half is 1
    plus the bytes' sum modulo 65,521, and 256 bytes sum to at most 65,280, so over each half of the
    header the modulo never wraps."""
    return (zlib.adler32(h[:256]) & 0xFFFF) + (zlib.adler32(h[256:]) & 0xFFFF) - 2


def _signed_sum(h: bytes) -> int:
    return sum(b - 256 if b >= 128 else b for b in h[:148] + b" " * 8 + h[156:])


def _pax(data: bytes, url: str, at: int) -> dict[bytes, bytes]:
    """The records of a pax extended header: "LEN key=value\n" each, LEN counting the whole
    record (so a value may hold a newline)."""
    out, pos = {}, 0
    data = data.rstrip(b"\0")
    while pos < len(data):
        digits, space, _ = data[pos : pos + 21].partition(b" ")
        n = int(digits) if space and digits.isdigit() else 0
        record = data[pos : pos + n]
        key, eq, value = record[len(digits) + 1 : -1].partition(b"=")
        if n <= len(digits) + 1 or len(record) < n or not record.endswith(b"\n") or not eq:
            raise AtariDataError(f"the pax header before byte {at:,} is malformed", file=url)
        out[key] = value
        pos += n
    return out
