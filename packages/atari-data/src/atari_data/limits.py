"""What one input may cost, checked against its declared size before anything is read.

An archive says how big its members are (a zip's central directory, a tar header, a PNG's IHDR)
before a byte of them is inflated, so a bomb is refused for the price of reading its header:
a 27 KB zip that would inflate to 1.5 GB, a 10 KB tar member declaring 20 GB, a PNG declaring
100,000 x 100,000 pixels. The limits are generous for real data (an Atari frame is 100 KB of
pixels, the largest Atari-HEAD trial archive a few hundred MB) and can be raised:
``atari-data --limit member=8192 ...`` or ``ATARI_DATA_LIMITS="member=8192,file=4096"`` (MB),
which worker processes inherit.
"""

from __future__ import annotations

import functools
import os
import re
import zipfile
from typing import BinaryIO

from atari_data.errors import AtariDataError
from laya_protocol import files

MB = 1 << 20
#: Sizes in MB: ``frame`` one image's decoded pixels; ``member`` one archive member (or all the
#: members of one inner archive) read into memory; ``file`` one JSON / JSONL / text file read
#: whole; ``record`` one JSON line or a shard's ``.json`` member (a record is a few hundred bytes, a
#: replay-packed episode's line one short entry per decision; parsed JSON can take 30 times its
#: text); ``ratio`` how many times a member
#: may inflate over its compressed size (real frames, labels and weights inflate 1-10x; a bomb
#: 1,000x and more).
DEFAULTS = {"frame": 64, "member": 2048, "file": 1024, "record": 1, "ratio": 200}
ENV = "ATARI_DATA_LIMITS"


def parse(text: str, source: str = "--limit") -> dict[str, int]:
    """``"member=4096,file=512"`` -> {"member": 4096, "file": 512}; unknown kinds are an error,
    blamed on ``source`` (the flag, or the environment variable the text came from)."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, _, value = part.partition("=")
        if kind not in DEFAULTS or not re.fullmatch(r"[0-9]{1,9}", value) or int(value) < 1:
            raise AtariDataError(
                f"{part!r} is not KIND=N with KIND one of {', '.join(DEFAULTS)} and N >= 1", field=source
            )
        out[kind] = int(value)
    return out


def limit(kind: str) -> int:
    """The limit of ``kind``: bytes for sizes, a plain factor for ``ratio``."""
    return _limits(os.environ.get(ENV, ""))[kind]


@functools.lru_cache(maxsize=8)
def _limits(env: str) -> dict[str, int]:
    """Every limit for one value of the environment variable (read per frame: parsed once)."""
    return {k: v if k == "ratio" else v * MB for k, v in {**DEFAULTS, **parse(env, ENV)}.items()}


def check(
    kind: str, size: int, *, file: str, field: str, compressed: int | None = None, line: int | None = None
) -> None:
    """Refuse ``size`` declared bytes of ``kind`` (and, given ``compressed``, an inflation over the ratio)."""
    cap = limit(kind)
    if size > cap:
        raise AtariDataError(
            f"declares {size:,} bytes, over the {kind} limit of {cap // MB:,} MB (raise it with "
            f"--limit {kind}=MB if this is real)",
            file=file,
            line=line,
            field=field,
        )
    if compressed is not None:
        check_ratio(size, compressed, file=file, field=field)


def check_ratio(size: int, compressed: int, *, file: str, field: str) -> None:
    """Refuse ``compressed`` bytes inflating to ``size`` over the ``ratio`` limit (past 64 KB: small
    members of zeros inflate far, and cheaply)."""
    ratio = limit("ratio")
    if size > 64 * 1024 and size > ratio * max(compressed, 1):
        raise AtariDataError(
            f"inflates {size // max(compressed, 1):,}-fold ({compressed:,} -> {size:,} bytes), "
            f"over the limit of {ratio:,} (a zip bomb? raise it with --limit ratio=N)",
            file=file,
            field=field,
        )


#: How many times its text parsed JSON or CSV may take, held as Python objects (a short row of
#: numbers as a dict: ~25 times, measured on Atari-HEAD label lines).
PARSED = 30


def check_parsed(text_bytes: int, *, file: str, field: str = "(file)") -> None:
    """Refuse a text that a reader will hold parsed, whole, when that would pass the member limit."""
    cap = limit("member")
    if text_bytes * PARSED > cap:
        raise AtariDataError(
            f"{text_bytes:,} bytes of text would take about {text_bytes * PARSED:,} parsed, over the member "
            f"limit of {cap // MB:,} MB (raise it with --limit member=MB if this is real)",
            file=file,
            field=field,
        )


def open_regular(path: os.PathLike | str, field: str = "(file)") -> BinaryIO:
    """``path`` opened for reading when it is a regular file; a device, FIFO or socket is refused
    (:func:`laya_protocol.files.open_regular`: opened non-blocking, so a FIFO cannot hold open())."""
    try:
        return files.open_regular(path)
    except files.Refused as e:
        raise AtariDataError(f"is {e}", file=str(path), field=field) from None


def read_bytes(path: os.PathLike | str, kind: str = "file", field: str = "(file)", follow: bool = True) -> bytes:
    """A whole regular file, refused before reading when it is larger than the limit of ``kind``. A
    device, FIFO or socket (``/dev/zero``, a pipe) is refused too: its size says nothing, and reading
    it could block or never end. At most the limit is read, whatever the file does meanwhile.
    ``follow`` False refuses a symbolic link (a layout's own files)."""
    try:
        return files.read_capped(path, limit(kind), follow)
    except files.Refused as e:
        if e.size is not None:
            check(kind, e.size, file=str(path), field=field)
        raise AtariDataError(f"is {e}", file=str(path), field=field) from None


def zip_member(archive, name: str, kind: str, file: str, field: str) -> bytes:
    """One member of an open ``zipfile.ZipFile``, refused by its declared size and inflation before
    it is inflated (zipfile then reads no more than the size declared)."""
    info = archive.getinfo(name)
    check(kind, info.file_size, file=file, field=field, compressed=info.compress_size)
    return archive.read(info)


def check_torch_zip(f: BinaryIO, *, file: str, field: str) -> None:
    """Refuse a torch.save file whose zip members are not stored as torch.save stores them, before
    torch.load inflates them: so loading one costs what the file holds, where a few MB of deflated
    zeros could declare GBs. ``f`` is left at its start."""
    try:
        with zipfile.ZipFile(f) as z:
            packed = next((i.filename for i in z.infolist() if i.compress_type != zipfile.ZIP_STORED), None)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise AtariDataError(f"is not a zip as torch.save writes ({e})", file=file, field=field) from None
    if packed:
        raise AtariDataError(
            f"member {packed} is compressed (torch.save stores every member as is)", file=file, field=field
        )
    f.seek(0)
