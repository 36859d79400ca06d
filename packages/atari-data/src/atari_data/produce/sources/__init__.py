"""Importers: one module per public dataset, each only turning the source's episodes into
:class:`atari_data.layout.writer.Step` streams for the shared writer (caps, subsampling, splits,
meta.json and ``_READY`` live there, not here)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from atari_data import limits
from atari_data.errors import AtariDataError


def parquet_rows(path: Path, columns: Sequence[str]) -> Iterator[dict]:
    """The rows of one Parquet file as dicts of ``columns``, a row group at a time; a damaged file or
    a missing column is a one-line error naming the file.

    A row group is decoded whole, so what it decodes to is checked first, under the member and
    ratio limits, as a zip member is: the sizes its footer declares plus 8 bytes a value (a million
    equal values run-length encode into a few bytes), then, read with every dictionary kept as one,
    the bytes those dictionaries expand to (one value stored once may be referred to from every
    row, and the footer counts it once)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
        missing = [c for c in columns if c not in f.schema_arrow.names]
        if not missing:  # byte strings come back as dictionaries, to be measured before they expand
            dense = pa.schema([f.schema_arrow.field(c) for c in columns])
            strings = [c.path for c in f.schema if c.path.split(".")[0] in columns and c.physical_type == "BYTE_ARRAY"]
            f = pq.ParquetFile(path, read_dictionary=strings)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise AtariDataError(f"not a readable Parquet file ({type(e).__name__}: {e})", file=str(path)) from None
    if missing:
        raise AtariDataError(
            f"missing column(s) {missing} (expected {list(columns)})", file=str(path), field=missing[0]
        )
    for group in range(f.num_row_groups):
        rg, field = f.metadata.row_group(group), f"row group {group}"
        chunks = [rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema.split(".")[0] in columns]
        packed = sum(c.total_compressed_size for c in chunks)
        declared = sum(c.total_uncompressed_size + 8 * c.num_values for c in chunks)
        limits.check("member", declared, file=str(path), field=field, compressed=packed)
        try:
            table = f.read_row_group(group, columns=list(columns))
        except Exception as e:  # noqa: BLE001 - a damaged row group raises whatever pyarrow meets
            raise AtariDataError(f"unreadable row group ({type(e).__name__}: {e})", file=str(path)) from None
        size = table.nbytes + sum(_expansion(c) for c in table.columns)
        limits.check("member", size, file=str(path), field=field, compressed=packed)
        yield from table.cast(dense).to_pylist()


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
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _expansion(array.flatten())
    if pa.types.is_map(kind):
        return _expansion(array.keys) + _expansion(array.items)
    if pa.types.is_struct(kind):
        return sum(_expansion(child) for child in array.flatten())
    return 0


def local_copy(spec: str, repo: str, patterns: list[str] | None = None) -> Path:
    """A folder holding the source: ``spec`` is a local path, or ``hub:REPO`` (downloaded through
    ``huggingface_hub`` into its cache; offline, a one-line error naming the local alternative)."""
    if not spec.startswith("hub:"):
        path = Path(spec)
        if not path.is_dir():
            raise AtariDataError(
                "is not a folder (pass a local copy, or hub:REPO when online)", file=spec, field="--from"
            )
        return path
    from huggingface_hub import snapshot_download

    repo_id = spec.removeprefix("hub:") or repo
    try:
        return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=patterns))
    except Exception as e:  # noqa: BLE001 - offline, missing repo, auth: all end here
        raise AtariDataError(
            f"cannot download {repo_id} ({type(e).__name__}); offline, download it where the Hub "
            f"is reachable (`hf download {repo_id} --repo-type dataset --local-dir DIR`) and pass "
            "--from DIR",
            field="--from",
        ) from None
