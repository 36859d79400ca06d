"""Reading a Parquet file someone else wrote, a row group at a time, at a cost checked first.

A row group is decoded whole, so what it decodes to is checked before, under the ``member`` and
``ratio`` limits, as a zip member is (:mod:`atari_data.limits`). Each page is charged what its own
header says it inflates to (what pyarrow inflates it to; the footer's total is a sum anyone can
write), and that does not say all of it either:
  * a million equal values run-length encode into a few bytes: each declared value is charged
    :data:`VALUE_BYTES`, what it costs once it is a Python object;
  * one byte string stored once in a dictionary page may be referred to from every row, and the
    footer counts it once: byte strings are read as dictionaries and what they expand to is
    added before they are expanded (a fixed-length one cannot stay a dictionary in pyarrow: its
    length times its count is declared, and charged);
so a 1 MB file that decodes to GBs is refused at the price of its indices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from atari_data import limits
from atari_data.errors import AtariDataError

#: Bytes one decoded value is charged: a float in a Python list takes 32, an int 40, an element of a
#: list of {bytes, path} structs 235 for its two values (pyarrow 26, measured with tracemalloc).
VALUE_BYTES = 128


def row_groups(path: Path, columns: Sequence[str] | None = None, dense: bool = True) -> Iterator:
    """Each row group of ``path`` (its ``columns``, or all) as a pyarrow Table once its cost was checked;
    with ``dense`` False, byte strings stay dictionaries (for a check that keeps nothing). A damaged
    file or a missing column is a one-line error naming the file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    limits.open_regular(path).close()  # a FIFO would hold pyarrow's open() for ever
    try:
        f = pq.ParquetFile(path)
        names = list(columns) if columns is not None else f.schema_arrow.names
        missing = [c for c in names if c not in f.schema_arrow.names]
        leaves = [c for c in f.schema if c.path.split(".")[0] in names]
        if not missing:  # byte strings come back as dictionaries, to be measured before they expand
            schema = pa.schema([f.schema_arrow.field(c) for c in names])
            strings = [c.path for c in leaves if c.physical_type == "BYTE_ARRAY"]
            f = pq.ParquetFile(path, read_dictionary=strings)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise AtariDataError(f"not a readable Parquet file ({type(e).__name__}: {e})", file=str(path)) from None
    if missing:
        raise AtariDataError(f"missing column(s) {missing} (expected {names})", file=str(path), field=missing[0])
    fixed = {c.path: c.length for c in leaves if c.physical_type == "FIXED_LEN_BYTE_ARRAY"}
    with open(path, "rb") as raw:  # the page headers: read here, once a file
        pages = [
            [_pages_inflate_to(raw, path, rg.column(i), f"row group {group}") for i in range(rg.num_columns)]
            for group, rg in ((g, f.metadata.row_group(g)) for g in range(f.num_row_groups))
        ]
    for group in range(f.num_row_groups):
        rg, field = f.metadata.row_group(group), f"row group {group}"
        chunks = [i for i in range(rg.num_columns) if rg.column(i).path_in_schema.split(".")[0] in names]
        packed = sum(rg.column(i).total_compressed_size for i in chunks)
        declared = sum(
            max(rg.column(i).total_uncompressed_size, pages[group][i])
            + rg.column(i).num_values * (VALUE_BYTES + fixed.get(rg.column(i).path_in_schema, 0))
            for i in chunks
        )
        limits.check("member", declared, file=str(path), field=field, compressed=packed)
        try:
            table = f.read_row_group(group, columns=names)
        except Exception as e:  # noqa: BLE001 - a damaged row group raises whatever pyarrow meets
            raise AtariDataError(f"unreadable row group ({type(e).__name__}: {e})", file=str(path)) from None
        try:
            size = table.nbytes + sum(_expansion(c) for c in table.columns)
        except Exception as e:  # noqa: BLE001 - a dictionary of another kind than byte strings, ...
            raise AtariDataError(f"unreadable row group ({type(e).__name__}: {e})", file=str(path)) from None
        limits.check("member", size, file=str(path), field=field, compressed=packed)
        if dense:
            try:
                table = table.cast(schema)  # the dictionaries' table is not kept beside the dense one
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
                raise AtariDataError(f"unreadable row group ({type(e).__name__}: {e})", file=str(path)) from None
        yield table


#: The most a page header may take: its statistics hold a page's min and max values, a few KB.
PAGE_HEADER_MAX = 1 << 20
#: What is read of a page first: its header, which is a few dozen bytes without long statistics.
PAGE_HEADER_READ = 4096


def _pages_inflate_to(f, path: Path, chunk, field: str) -> int:
    """What a column chunk's pages say they inflate to, read from each page's own header: the footer's
    total is a sum someone wrote (a 34 KB file whose footer said 1,000 bytes held a 1 GB page), while
    pyarrow inflates each page to the size its header gives."""
    # as Arrow reads it: some writers flag a dictionary page and leave its offset 0
    dictionary = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
    start = min(dictionary, chunk.data_page_offset) if dictionary else chunk.data_page_offset
    end, total, pos = start + chunk.total_compressed_size, 0, start
    while pos < end:
        header = _header_at(f, pos, end)
        if header is None:
            raise AtariDataError(f"a page header at byte {pos:,} does not read", file=str(path), field=field)
        inflated, deflated, used = header
        total += inflated
        pos += used + deflated
    return total


def _header_at(f, pos: int, end: int) -> tuple[int, int, int] | None:
    """The page header at ``pos``: a few KB read, and more (to :data:`PAGE_HEADER_MAX`) only for one
    longer than that; None for one that does not read."""
    for size in (PAGE_HEADER_READ, PAGE_HEADER_MAX):
        f.seek(pos)
        try:
            return _page_header(f.read(min(size, end - pos)))
        except IndexError:  # ran past what was read
            continue
        except ValueError:
            return None
    return None


def _page_header(data: bytes) -> tuple[int, int, int]:
    """(uncompressed_page_size, compressed_page_size, header bytes) of a Parquet PageHeader in Thrift's
    compact protocol; its nested fields are skipped, not read."""
    pos, sizes = 0, {}

    def varint() -> int:
        nonlocal pos
        out = shift = 0
        while True:
            b = data[pos]
            pos += 1
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise ValueError("a varint past 64 bits")

    def skip(kind: int, depth: int = 0) -> None:
        nonlocal pos
        if depth > 32:
            raise ValueError("nested too deep")
        if kind in (1, 2):  # a boolean, in the field header itself
            return
        if kind == 3:
            pos += 1
        elif kind in (4, 5, 6):
            varint()
        elif kind == 7:
            pos += 8
        elif kind == 8:
            n = varint()  # read first: `pos += varint()` would add to the position before the length
            pos += n
        elif kind in (9, 10):  # list, set
            head = data[pos]
            pos += 1
            n = head >> 4 if head >> 4 != 15 else varint()
            for _ in range(n):
                if head & 0x0F in (1, 2):
                    pos += 1  # a boolean element is a byte
                else:
                    skip(head & 0x0F, depth + 1)
        elif kind == 11:  # map
            n = varint()
            if n:
                kinds = data[pos]
                pos += 1
                for _ in range(n):
                    skip(kinds >> 4, depth + 1)
                    skip(kinds & 0x0F, depth + 1)
        elif kind == 12:
            struct(depth + 1)
        else:
            raise ValueError(f"type {kind}")
        if pos > len(data):
            raise IndexError

    def struct(depth: int) -> None:
        nonlocal pos
        last_here = 0
        while True:
            head = data[pos]
            pos += 1
            if head == 0:
                return
            delta, kind = head >> 4, head & 0x0F
            fid = last_here + delta if delta else (lambda z: (z >> 1) ^ -(z & 1))(varint())
            last_here = fid
            if depth == 0 and fid in (2, 3) and kind == 5:  # uncompressed_page_size, compressed_page_size
                z = varint()
                sizes[fid] = (z >> 1) ^ -(z & 1)
            else:
                skip(kind, depth)

    struct(0)
    if 2 not in sizes or 3 not in sizes or min(sizes.values()) < 0:
        raise ValueError("no page sizes")
    return sizes[2], sizes[3], pos


def rows(path: Path, columns: Sequence[str]) -> Iterator[dict]:
    """The rows of ``path`` as dicts of ``columns``, a checked row group at a time."""
    for table in row_groups(path, columns):
        yield from table.to_pylist()


def check(path: Path) -> int:
    """Refuse ``path`` when a row group of it would cost more than the limits to decode; keeps nothing
    and returns its rows."""
    return sum(table.num_rows for table in row_groups(path, dense=False))


def _expansion(array) -> int:
    """Bytes an Arrow array's dictionaries add when their values are written out once per reference."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        return sum(_expansion(chunk) for chunk in array.chunks)
    kind = array.type
    if pa.types.is_dictionary(kind):
        lengths = pc.take(pc.binary_length(array.dictionary), array.indices)
        return int(pc.sum(lengths).as_py() or 0)
    if pa.types.is_map(kind):
        return _expansion(array.keys) + _expansion(array.items)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _expansion(array.flatten())
    if pa.types.is_struct(kind):
        return sum(_expansion(child) for child in array.flatten())
    return 0
