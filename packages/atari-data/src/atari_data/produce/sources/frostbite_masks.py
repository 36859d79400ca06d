"""Frostbite with player masks (``EpicPinkPenguin/atari_frostbite_with_masks``) -> source
``frostbite_masks``.

A local copy holds Parquet files of one config (``FrostbiteNoFrameskip-v4``), splits ``train``
and ``test``, rows in temporal order with ``observation`` (a 128x128 RGB image), ``mask`` (a
128x128 L image, 0/255), ``action`` (a full 18-action id), ``reward``, ``terminated`` and
``truncated`` (both describing the step into this observation). Observations are copied as the
source gives them (``rgb_128x128``); each mask is written beside its frame and referenced from the
record's provenance (``mask``). A terminal flag ends a life, not necessarily a game, so an
episode here is one life: provenance keeps the life index and the game index (a new game after
a truncation; the data's flags cannot tell a game over from a lost life). The dataset's train and
test become train and val, so no segment of a game crosses splits.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from atari_data import parquet
from atari_data.errors import AtariDataError
from atari_data.layout.png import frame_defect
from atari_data.layout.writer import GameWriter, Step
from atari_data.play.actions import minimal_index, minimal_labels
from atari_data.produce.sources import UPSTREAM_SPLITS, episode_number
from laya_protocol.games import minimal_actions
from laya_protocol.protocol import FRAME_CAP

SOURCE = "frostbite_masks"
GAME = "Frostbite"
REPO = "EpicPinkPenguin/atari_frostbite_with_masks"
ORIGIN = REPO
COLUMNS = ("observation", "mask", "action", "reward", "terminated", "truncated")


def parquet_files(root: Path, split: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"{split}-*.parquet") if not any(part.startswith(".") for part in p.parts))


def available_games(root: Path) -> list[str]:
    return [GAME] if parquet_files(root, "train") else []


def lives(files: list[Path], longest: int = FRAME_CAP) -> Iterator[tuple[int, int, list[dict]]]:
    """(game index, life index, rows) per life: a run of rows ending at a terminal flag. Each row
    also gets ``row``, its index in the split. A life is held whole, so one longer than ``longest``
    rows (ALE's frame cap on an episode; these rows are single frames) is refused, not held."""
    game = life = n = 0
    run: list[dict] = []
    for path in files:
        for row in parquet.rows(path, COLUMNS):
            row["row"], n = n, n + 1
            run.append(row)
            if len(run) > longest:
                raise AtariDataError(
                    f"rows {run[0]['row']}-{row['row']}: no terminal flag in {len(run)} rows, longer than any "
                    f"episode ({longest} frames); are the terminated/truncated flags missing?",
                    file=str(path),
                    field="terminated",
                )
            for flag in ("terminated", "truncated"):  # text "False" is true, a null no flag: neither is one
                if type(row[flag]) is not bool:
                    raise AtariDataError(
                        f"row {row['row']}: is {row[flag]!r}, expected true or false", file=str(path), field=flag
                    )
            if row["terminated"] or row["truncated"]:
                yield game, life, run
                run, life = [], life + 1
                if row["truncated"]:
                    game, life = game + 1, 0
    if run:
        yield game, life, run


def import_game(
    root: str | Path, out: str | Path, game: str = GAME, caps: dict | None = None, force: bool = False, progress=None
) -> dict | None:
    root = Path(root)
    if game != GAME:
        raise AtariDataError(f"{game}: this dataset has Frostbite only", field="--games")
    files = {split: parquet_files(root, split) for split in UPSTREAM_SPLITS}
    if not files["train"]:
        raise AtariDataError(f"no train-*.parquet below (a local copy of {REPO})", file=str(root))
    actions = minimal_actions(GAME)
    labels = minimal_labels(GAME)
    with GameWriter(
        out,
        SOURCE,
        GAME,
        frame_format="rgb_128x128",
        frames=1,
        actions=actions,
        origin=REPO,
        license="see the dataset card",
        force=force,
        progress=progress,
        caps=caps or {},  # the writer fills what is missing with its DEFAULT_CAPS
    ) as writer:
        if writer.complete:
            return None
        for split, kind in UPSTREAM_SPLITS.items():
            for n, (game_i, life_i, run) in enumerate(lives(files[split])):
                writer.add_episode(episode_number(kind, n), kind, _steps(run, labels, game_i, life_i, writer))
        return writer.finish()


def _steps(run: list[dict], labels: dict[str, int], game: int, life: int, writer: GameWriter) -> Iterator[Step]:
    for row in run:
        label = minimal_index(labels, row["action"])
        if isinstance(label, str):  # None, a float, text: counted, not a crash
            writer.drop(label)
            continue
        obs, mask = (row[c].get("bytes") if isinstance(row[c], dict) else None for c in ("observation", "mask"))
        if not isinstance(obs, bytes) or not isinstance(mask, bytes):
            writer.drop("bad_observation" if not isinstance(obs, bytes) else "bad_mask")
            continue
        if not obs or writer.frame_defect(obs):  # intact, RGB, 128x128: what validate --images asks
            writer.drop("bad_observation")
            continue
        if not _grey_mask(mask):  # an L image of 128x128, as the card says
            writer.drop("bad_mask")
            continue
        yield Step(
            frame=obs,
            label=label,
            side={"mask": mask},
            provenance={
                "row": row["row"],
                "game": game,
                "life": life,
                "reward": float(row["reward"])
                if type(row["reward"]) in (int, float) and math.isfinite(row["reward"])
                else None,
                "terminated": bool(row["terminated"]),
            },
        )


def _grey_mask(data: bytes) -> bool:
    """Whether ``data`` is a whole 8-bit grey 128x128 PNG: an RGB or 16-bit one is no mask of the card's."""
    return frame_defect(data, ("PNG",), ("L", (128, 128))) is None
