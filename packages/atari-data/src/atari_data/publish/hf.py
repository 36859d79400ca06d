"""A `datasets` builder that reads an atari-data layout folder directly, without packing.

For data that sits in the layout (a shared volume) and is never packed. Loading scripts are gone
from `datasets`, so use the class itself:

    from atari_data.publish.hf import AtariLayout
    builder = AtariLayout(data_dir="data/atari", source="expert2f")
    builder.download_and_prepare()
    train = builder.as_dataset(split="train")          # the same rows as a packed config

Features come from the frozen schema; splits are ``train`` and ``validation``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import datasets

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.layout import META, list_games
from atari_data.publish.pack import hf_row, layout_rows
from atari_data.schema import hf_features
from laya_protocol.names import HUB_SPLITS


@dataclass
class AtariLayoutConfig(datasets.BuilderConfig):
    source: str = "expert2f"
    fingerprint: str = ""  # of the source's ready games; part of the cache key, so a changed layout is re-read

    def __post_init__(self):
        self.name = self.source
        super().__post_init__()


def layout_fingerprint(root: str, source: str) -> str:
    """A hash of every ready game of ``source`` in ``root``: its name and its meta.json's bytes (which
    record what was written: counts, labels, caps, seed)."""
    h = hashlib.sha256()
    for g in list_games(root, [source]):
        h.update(f"{g.source}/{g.game}\0".encode() + limits.read_bytes(g.path / META))
    return h.hexdigest()[:16]


class AtariLayout(datasets.GeneratorBasedBuilder):
    BUILDER_CONFIG_CLASS = AtariLayoutConfig

    def __init__(self, *args, data_dir: str | None = None, source: str = "expert2f", **kwargs):
        if data_dir:  # the cache key follows the layout's contents, not only its path
            kwargs["fingerprint"] = layout_fingerprint(data_dir, source)
        super().__init__(*args, data_dir=data_dir, source=source, **kwargs)

    def _games(self):
        if not self.config.data_dir:
            raise AtariDataError("AtariLayout needs data_dir=<layout root>", field="data_dir")
        games = list_games(self.config.data_dir, [self.config.source])
        if not games:
            raise AtariDataError(
                f"has no ready games of source {self.config.source}", file=self.config.data_dir, field="source"
            )
        return games

    def _info(self):
        frames = self._games()[0].meta()["frames"]
        return datasets.DatasetInfo(
            description=f"atari-data layout, source {self.config.source}", features=hf_features(frames)
        )

    def _split_generators(self, dl_manager):
        games = self._games()
        return [
            datasets.SplitGenerator(name=hf, gen_kwargs={"games": games, "split": split})
            for split, hf in HUB_SPLITS.items()
        ]

    def _generate_examples(self, games, split):
        names = list(self.info.features)
        for rec, image, prev, _side in layout_rows(games, split):
            yield rec["id"], hf_row(rec, image, prev, names)
