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
    a missing column is a one-line error naming the file."""
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
    except Exception as e:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ... for a damaged file
        raise AtariDataError(f"not a readable Parquet file ({type(e).__name__}: {e})", file=str(path)) from None
    missing = [c for c in columns if c not in f.schema_arrow.names]
    if missing:
        raise AtariDataError(
            f"missing column(s) {missing} (expected {list(columns)})", file=str(path), field=missing[0]
        )
    for group in range(f.num_row_groups):
        # A row group is inflated whole: refused by the sizes its footer declares, as a zip member is.
        rg = f.metadata.row_group(group)
        chunks = [rg.column(i) for i in range(rg.num_columns) if rg.column(i).path_in_schema.split(".")[0] in columns]
        size, packed = sum(c.total_uncompressed_size for c in chunks), sum(c.total_compressed_size for c in chunks)
        limits.check("member", size, file=str(path), field=f"row group {group}", compressed=packed)
        try:
            rows = f.read_row_group(group, columns=list(columns)).to_pylist()
        except Exception as e:  # noqa: BLE001 - a damaged row group raises whatever pyarrow meets
            raise AtariDataError(f"unreadable row group ({type(e).__name__}: {e})", file=str(path)) from None
        yield from rows


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
