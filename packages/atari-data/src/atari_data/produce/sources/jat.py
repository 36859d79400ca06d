"""JAT (``jat-project/jat-dataset``, configs ``atari-<game>``, Apache-2.0) -> source ``jat``.

A local copy holds ``atari-<game>/{train,test}-*.parquet``; one row is one whole game (all lives):
``image_observations`` (PNG structs), ``discrete_actions`` (ALE minimal-set indices) and
``rewards``. Each image is an 84x84 RGBA PNG holding a 4-frame grey stack, oldest first, the
newest the frame the action was taken on; we keep only the newest, as an 84x84 grey PNG
(``gray_84x84``). Two games were published with the stack's bytes reshaped instead of
transposed, so the frame order is established from the data for every game: in consecutive
stacks the three newest frames of step t must be the three oldest of step t+1. JAT train becomes
train, JAT test becomes val; there is no ``target``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from atari_data import parquet
from atari_data.errors import AtariDataError
from atari_data.layout.png import decode_png, encode_png
from atari_data.layout.writer import GameWriter, Step
from atari_data.play.actions import resolve_game
from atari_data.produce.sources import UPSTREAM_SPLITS, episode_number
from atari_data.threads import frame_threads
from laya_protocol.games import minimal_actions

SOURCE = "jat"
REPO = "jat-project/jat-dataset"
ORIGIN = REPO
LICENSE = "Apache-2.0"
COLUMNS = ("image_observations", "discrete_actions", "rewards")
FRAME_FORMAT = "gray_84x84"  # the newest frame of each stack
STACK = (84, 84, 4)  # an RGBA image holding four 84x84 grey frames
# Config names that are not the ALE v5 name with its capitals removed.
QUIRKS = {
    "asteroid": "Asteroids",
    "kongfumaster": "KungFuMaster",
    "montezuma": "MontezumaRevenge",
    "privateye": "PrivateEye",
}
ORDER_CHECK_STEPS = 64
ORDER_MIN_AGREEMENT = 0.9
FRAMES_PER_TASK = 64


def game_of(config: str) -> str:
    """``atari-kongfumaster`` -> ``KungFuMaster``."""
    name = config.removeprefix("atari-")
    return QUIRKS.get(name) or resolve_game(name)


def config_of(game: str) -> str:
    for cfg, g in QUIRKS.items():
        if g == game:
            return f"atari-{cfg}"
    return f"atari-{game.lower()}"


# -- frame order ----------------------------------------------------------------------------------


def _stack(rgba: np.ndarray, layout: str) -> np.ndarray:
    """[4, 84, 84], oldest first, from a decoded 84x84x4 image in the given byte layout."""
    if layout == "channels":  # R oldest ... A newest (the documented layout)
        return np.moveaxis(rgba, -1, 0)
    return rgba.reshape(4, *rgba.shape[:2])  # (4, 84, 84) bytes written as if (84, 84, 4)


def frame_layout(stacks: list[np.ndarray]) -> str | None:
    """The byte layout in which consecutive stacks shift by one frame, or None when neither does."""
    return next((layout for layout in LAYOUTS if _shifts(stacks, layout)), None)


LAYOUTS = ("channels", "reshaped")


def _shifts(stacks: list[np.ndarray], layout: str) -> bool:
    """Whether consecutive stacks, read in ``layout``, shift by one frame (static frames do in both)."""
    s = [_stack(x, layout) for x in stacks]
    pairs = list(zip(s, s[1:], strict=False))
    return bool(pairs) and sum(np.array_equal(a[1:], b[:3]) for a, b in pairs) >= ORDER_MIN_AGREEMENT * len(pairs)


# -- reading --------------------------------------------------------------------------------------


def parquet_files(root: Path, game: str, split: str) -> list[Path]:
    return sorted((root / config_of(game)).glob(f"{split}-*.parquet"))


def available_games(root: Path) -> list[str]:
    folders: dict[str, Path] = {}
    for p in sorted(root.glob("atari-*")):
        if p.is_dir():
            try:
                game = game_of(p.name)
            except AtariDataError as e:  # name the folder: the game alone does not say where it came from
                raise AtariDataError(
                    f"{e.message} (a folder of the copy is atari-<game>)", file=str(p), field="(folder)"
                ) from None
            if game in folders:  # one would be read, the other's games ignored
                raise AtariDataError(
                    f"is {game}, as {folders[game].name} is: one folder a game", file=str(p), field="(folder)"
                )
            folders[game] = p
    return sorted(folders)


def rows(path: Path) -> Iterator[tuple[int, dict]]:
    """(row index, {column: list}) of one Parquet file."""
    return enumerate(parquet.rows(path, COLUMNS))


def _decode(obs) -> np.ndarray | None:
    data = obs.get("bytes") if isinstance(obs, dict) else None
    if not data:
        return None
    try:
        img = decode_png(data)
    except Exception:  # noqa: BLE001 - a corrupt PNG is a counted drop, not a crash
        return None
    return img if img.shape == STACK else None  # another size passed here, and failed validate --images


def _newest_pngs(observations: list, layout: str) -> list[bytes | None]:
    out = []
    for obs in observations:
        rgba = _decode(obs)
        out.append(None if rgba is None else encode_png(np.ascontiguousarray(_stack(rgba, layout)[3])))
    return out


def episode_steps(row: dict, layout: str, n_actions: int, writer: GameWriter) -> Iterator[Step]:
    """The newest frame and action of each step; undecodable frames and actions outside the
    minimal set are dropped and counted."""
    images, actions, rewards = (row[c] for c in COLUMNS)
    if not (len(images) == len(actions) == len(rewards)):
        writer.drop("row_length_mismatch", len(images))
        return
    # zlib releases the GIL and Pillow's PNG decoding mostly holds it: one thread per core re-encodes
    # a game's frames, in order (2 threads measured 1.3x one; 8 threads on 2 cores, slower than 2).
    chunks = [images[i : i + FRAMES_PER_TASK] for i in range(0, len(images), FRAMES_PER_TASK)]
    pngs = [png for chunk in _pool().map(_newest_pngs, chunks, [layout] * len(chunks)) for png in chunk]
    for t, (png, action, reward) in enumerate(zip(pngs, actions, rewards, strict=True)):
        if png is None:
            writer.drop("corrupt_image")
            continue
        if type(action) is not int or not 0 <= action < n_actions:  # None, NaN, text: counted, not a crash
            writer.drop("action_out_of_range")
            continue
        if type(reward) not in (int, float) or not math.isfinite(reward):
            writer.drop("bad_reward")
            continue
        yield Step(frame=png, label=action, provenance={"reward": float(reward), "jat_step": t})


@functools.cache
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(frame_threads(), thread_name_prefix="jat-frames")


def import_game(
    root: str | Path, out: str | Path, game: str, caps: dict | None = None, force: bool = False, progress=None
) -> dict | None:
    """Write ``<out>/jat/<Game>`` from the local copy at ``root``; returns its meta.json (None when
    it was already complete)."""
    root, game = Path(root), resolve_game(game)
    files = {split: parquet_files(root, game, split) for split in UPSTREAM_SPLITS}
    if not files["train"]:
        raise AtariDataError(
            f"no {config_of(game)}/train-*.parquet (a local copy of {REPO}: "
            f"`hf download {REPO} --repo-type dataset --include '{config_of(game)}/*'`)",
            file=str(root),
        )
    actions = minimal_actions(game)
    with GameWriter(
        out,
        SOURCE,
        game,
        frame_format=FRAME_FORMAT,
        frames=1,
        actions=actions,
        origin=f"{REPO} ({config_of(game)})",
        license=LICENSE,
        force=force,
        progress=progress,
        caps=caps or {},  # the writer fills what is missing with its DEFAULT_CAPS
    ) as writer:
        if writer.complete:
            return None
        layout = _establish_layout(files["train"][0], game)
        for split, kind in UPSTREAM_SPLITS.items():
            first = 0  # the split's rows in its earlier files
            for path in files[split]:
                n, checked = 0, False
                for i, row in rows(path):
                    if not all(isinstance(row[c], list) for c in COLUMNS):
                        raise AtariDataError(
                            f"{', '.join(COLUMNS)} must be lists (one per step), got "
                            + ", ".join(type(row[c]).__name__ for c in COLUMNS),
                            file=str(path),
                            field=f"row {i}",
                        )
                    if not checked:  # each file's order, on its first game: another file's may differ
                        checked = _same_layout(row, layout, path, i)
                    writer.add_episode(
                        episode_number(kind, first + i), kind, episode_steps(row, layout, len(actions), writer)
                    )
                    n = i + 1
                first += n
        return writer.finish()


def _head_stacks(row: dict) -> list[np.ndarray]:
    """A game's first decodable frame stacks, which tell its byte layout."""
    return [x for x in map(_decode, row["image_observations"][: ORDER_CHECK_STEPS + 1]) if x is not None]


def _same_layout(row: dict, layout: str, path: Path, i: int) -> bool:
    """Whether a game's first stacks told its file's byte layout (False: too few to tell); a file
    in the other one is refused, as the frames would be read out of order."""
    stacks = _head_stacks(row)
    if _shifts(stacks, layout):
        return True
    other = next(x for x in LAYOUTS if x != layout)
    if _shifts(stacks, other):
        raise AtariDataError(
            f"its frame stacks are in the {other} byte order, the first train file's in the {layout} order: "
            "one order a game",
            file=str(path),
            field=f"row {i}: image_observations",
        )
    return False  # neither: too few or too odd to tell, as the next game may


def _establish_layout(path: Path, game: str) -> str:
    for _, row in rows(path):
        if not isinstance(row["image_observations"], list):
            continue  # not a game: refused, naming its row, when the games are read
        stacks = _head_stacks(row)
        if len(stacks) < 2:
            continue
        layout = frame_layout(stacks)
        if layout is None:
            raise AtariDataError(
                f"{game}: consecutive frame stacks do not shift by one frame in either known "
                f"byte layout (checked the first {len(stacks)} of a game); refusing to guess",
                file=str(path),
                field="image_observations",
            )
        return layout
    raise AtariDataError(
        f"{game}: no game with two readable frames to establish the frame order",
        file=str(path),
        field="image_observations",
    )


def download_patterns(games: Sequence[str] | None) -> list[str] | None:
    """Only the configs asked for (``--from hub:``)."""
    return [config_of(resolve_game(g, "--games")) + "/*" for g in games] if games else None
