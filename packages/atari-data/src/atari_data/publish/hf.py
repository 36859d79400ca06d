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

from dataclasses import dataclass

import datasets

from atari_data.errors import AtariDataError
from atari_data.layout import list_games
from atari_data.publish.pack import hf_row, layout_rows
from atari_data.schema import hf_features
from laya_protocol.names import HUB_SPLITS


@dataclass
class AtariLayoutConfig(datasets.BuilderConfig):
    source: str = "expert2f"

    def __post_init__(self):
        self.name = self.source
        super().__post_init__()


class AtariLayout(datasets.GeneratorBasedBuilder):
    BUILDER_CONFIG_CLASS = AtariLayoutConfig

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
