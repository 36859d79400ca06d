"""Importers: one module per public dataset, each only turning the source's episodes into
:class:`atari_data.layout.writer.Step` streams for the shared writer (caps, subsampling, splits,
meta.json and ``_READY`` live there, not here)."""

from __future__ import annotations

from pathlib import Path

from atari_data.errors import AtariDataError
from laya_protocol.seeds import IMPORTED_VAL_FROM

#: A source with train and test splits of its own: its test episodes become val records.
UPSTREAM_SPLITS = {"train": "train", "test": "val"}


def episode_number(split: str, n: int) -> int:
    """The ``n``-th episode of an imported ``split``: val episodes numbered apart from train's, from
    :data:`laya_protocol.seeds.IMPORTED_VAL_FROM`."""
    return n if split == "train" else IMPORTED_VAL_FROM + n


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
