"""Record a checkpoint playing one episode, with its chosen action and probability on every frame."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from atari_data.layout import remove, staged
from atari_data.play.actions import resolve_game
from atari_data.play.ale import AtariGame, PreviousFrame, play_episode
from laya_eval.batch import Batch, PolicyError
from laya_eval.batch import choose as pick
from laya_protocol.errors import cause
from laya_protocol.files import file_above
from laya_protocol.locks import FileLock
from laya_protocol.protocol import DATA_DECISION_CAP, EVAL_DECISION_CAP
from laya_protocol.seeds import EVAL_SEED_BASE, seed_problem


def annotate(frame: np.ndarray, text: str, scale: int = 2) -> Image.Image:
    im = Image.fromarray(frame).resize((frame.shape[1] * scale, frame.shape[0] * scale), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(im)
    draw.rectangle([0, 0, im.width, 14], fill=(0, 0, 0))
    draw.text((3, 2), text, fill=(255, 255, 0))
    return im


VIDEO_SUFFIXES = (".gif", ".mp4")
#: The most decisions a video holds: an episode's (ALE stops at its frame limit), or a GIF's, whose
#: frames Pillow keeps whole until it writes (320 x 420 bytes each: 0.6 GB at this many).
MAX_DECISIONS = {".mp4": DATA_DECISION_CAP, ".gif": EVAL_DECISION_CAP}
DECISIONS = 1_000  # what a video records unless asked: about a minute of play


class _EpisodeOSError(Exception):
    """An OSError of the policy or the emulator while the video is written, told apart from the video's own."""

    def __init__(self, original: OSError):
        self.original = original


def decisions_problem(suffix: str, decisions: int) -> str | None:
    """Why a video of ``suffix`` (``.gif``, ``.mp4``) cannot hold ``decisions``, or None."""
    most = MAX_DECISIONS[suffix.lower()]
    return None if 1 <= decisions <= most else f"{decisions}: expected 1 to {most:,} for a {suffix}"


def check_video(game: str, out: str | Path, seed: int, max_decisions: int) -> tuple[str, Path, Path]:
    """(the game's ALE name, the video, its temporary) once every argument of a recording is checked,
    before a checkpoint is loaded or a decision played: one ValueError naming the flag or file."""
    game = resolve_game(game, "--game")  # "pong" is Pong: the policy is asked the question it learned
    out = Path(out)
    if out.suffix.lower() not in VIDEO_SUFFIXES:
        raise ValueError(f"{out}: the video must be .gif or .mp4")
    if problem := decisions_problem(out.suffix, max_decisions):
        longer = "; longer videos as .mp4" if MAX_DECISIONS[out.suffix.lower()] < DATA_DECISION_CAP else ""
        raise ValueError(f"--max-decisions {problem}{longer}")
    if problem := seed_problem(seed, 1):
        raise ValueError(f"--seed {problem}")
    if out.is_dir() and not out.is_symlink():
        raise ValueError(f"{out}: is a folder; name the video file")
    if above := file_above(out):  # the folders are made when the episode is played, not by a refusal
        raise ValueError(f"{out.parent}: cannot be made a folder ({above} is a file)")
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    if tmp.is_dir() and not tmp.is_symlink():  # a temporary of ours is a file: this is someone's folder
        raise ValueError(f"{tmp}: is a folder play did not make; move it, play writes its video there first")
    return game, out, tmp


def record_episode(
    policy,
    game: str,
    out: str | Path,
    seed: int = EVAL_SEED_BASE,
    max_decisions: int = DECISIONS,
    greedy: bool = True,
    fps: int = 15,
) -> dict:
    """Play one episode (two-frame rule, auto-FIRE) and write it as .gif or .mp4; returns a summary.

    The video is checked for a place first (a folder in its name's place, or none above it, is said
    before the episode is played), written by one ``play`` at a time and renamed into place once
    whole: stopped or failed, it leaves nothing. An mp4 is written frame by frame while the episode
    plays and holds none in memory; a GIF's frames are kept (Pillow writes them at the end)."""
    game, out, tmp = check_video(game, out, seed, max_decisions)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{out.parent}: cannot be made a folder ({e.strerror})") from None
    with FileLock.beside(out, str(out), lambda message, file: ValueError(f"{file}: {message}")):
        g = AtariGame(game)
        policy.reset(game, g.actions)
        rng = np.random.default_rng(seed)
        previous = PreviousFrame()
        decisions = 0

        def frames() -> Iterator[Image.Image]:
            nonlocal decisions
            shown: list[Image.Image] = []

            def choose(d) -> int:
                first = np.array([d.step == 0])
                batch = Batch(game, g.actions, d.frame[None], previous(d)[None], first, np.zeros(1, int))
                answer = policy(batch)
                try:
                    a = int(pick(answer, batch, greedy, rng)[0])  # the judge's checks and draw
                except PolicyError as e:  # NaN probabilities of a diverged run, say
                    raise ValueError(f"the policy {e}") from None
                p = np.asarray(answer, float)[0]
                said = f" p={p[a]:.2f}" if p.ndim == 1 and p.shape == (len(g.actions),) else ""
                shown.append(annotate(d.frame, f"{d.step:5d} {g.actions[a]}{said} score {g.score:g}"))
                return a

            try:
                for _ in play_episode(g, seed, choose, max_decisions):
                    decisions += 1
                    yield shown.pop()
            except OSError as e:
                raise _EpisodeOSError(e) from None

        with staged(tmp):
            remove(tmp)  # a link or FIFO planted there is replaced, never written through
            try:
                _write(tmp, frames(), fps)
            except _EpisodeOSError as e:  # the policy's or the emulator's: said as the CLI says an OSError
                raise e.original from None
            except OSError as e:  # a full disk, a folder made read-only meanwhile
                raise ValueError(f"{out}: cannot be written ({e.strerror or cause(e)})") from None
            if out.suffix.lower() == ".mp4" and _mp4_frames(tmp) != decisions:  # ffmpeg ends unheard on a full disk
                raise ValueError(f"{out}: was not written whole (a full disk?)")
            os.replace(tmp, out)
    return {"game": game, "decisions": decisions, "score": g.score, "video": str(out)}


def _write(path: Path, frames: Iterator[Image.Image], fps: int) -> None:
    """Frames to ``path`` as they come (the episode is played as they are asked for)."""
    if path.suffix.lower() == ".gif":
        first = next(frames)
        first.save(path, format="GIF", save_all=True, append_images=frames, duration=int(1000 / fps), loop=0)
        return
    import imageio.v2 as iio

    # macro_block_size 1: the frames' even sides as they are (16 rescaled 420 to 432 rows, with a warning)
    writer: Any = iio.get_writer(path, format="FFMPEG", fps=fps, codec="libx264", macro_block_size=1)
    with writer:
        for frame in frames:
            writer.append_data(np.asarray(frame))


def _mp4_frames(path: Path) -> int | None:
    """The frames an mp4 reads back with, or None where it does not read."""
    import imageio.v2 as iio

    try:
        reader: Any = iio.get_reader(path, format="FFMPEG")
        with reader:
            return reader.count_frames()
    except (OSError, RuntimeError, ValueError):
        return None
