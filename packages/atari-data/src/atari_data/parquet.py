"""Reading a Parquet file someone else wrote, a row group at a time, at a cost checked first.

A row group is decoded whole, so what it decodes to is checked before, under the ``member`` and
``ratio`` limits, as a zip member is (:mod:`atari_data.limits`). Its footer does not say all of it:
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
    for group in range(f.num_row_groups):
        rg, field = f.metadata.row_group(group), f"row group {group}"
        chunks = [rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema.split(".")[0] in names]
        packed = sum(c.total_compressed_size for c in chunks)
        declared = sum(
            c.total_uncompressed_size + c.num_values * (VALUE_BYTES + fixed.get(c.path_in_schema, 0)) for c in chunks
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
