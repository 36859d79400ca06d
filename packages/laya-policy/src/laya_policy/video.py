"""Record a checkpoint playing one episode, with its chosen action and probability on every frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from atari_data.layout import remove
from atari_data.play.ale import AtariGame, PreviousFrame, play_episode
from laya_eval.batch import Batch
from laya_protocol.seeds import EVAL_SEED_BASE


def annotate(frame: np.ndarray, text: str, scale: int = 2) -> Image.Image:
    im = Image.fromarray(frame).resize((frame.shape[1] * scale, frame.shape[0] * scale), Image.Resampling.NEAREST)
    draw = ImageDraw.Draw(im)
    draw.rectangle([0, 0, im.width, 14], fill=(0, 0, 0))
    draw.text((3, 2), text, fill=(255, 255, 0))
    return im


def record_episode(
    policy,
    game: str,
    out: str | Path,
    seed: int = EVAL_SEED_BASE,
    max_decisions: int = 1_000,
    greedy: bool = True,
    fps: int = 15,
) -> dict:
    """Play one episode (two-frame rule, auto-FIRE) and write it as .gif or .mp4; returns a summary."""
    out = Path(out)
    if out.suffix.lower() not in (".gif", ".mp4"):
        raise ValueError(f"{out}: the video must be .gif or .mp4")
    g = AtariGame(game)
    policy.reset(game, g.actions)
    rng = np.random.default_rng(seed)
    frames: list[Image.Image] = []
    previous = PreviousFrame()

    def choose(d) -> int:
        prev = previous(d)
        p = np.asarray(
            policy(Batch(game, g.actions, d.frame[None], prev[None], np.array([d.step == 0]), np.zeros(1, dtype=int)))
        )[0]
        a = int(np.argmax(p)) if greedy else int(rng.choice(len(p), p=p / p.sum()))
        frames.append(annotate(d.frame, f"{d.step:5d} {g.actions[a]} p={p[a]:.2f} score {g.score:g}"))
        return a

    for _ in play_episode(g, seed, choose, max_decisions):
        pass
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    remove(tmp)  # a link or FIFO planted there is replaced below, never written through
    if out.suffix.lower() == ".gif":
        frames[0].save(tmp, save_all=True, append_images=frames[1:], duration=int(1000 / fps), loop=0)
    else:
        import imageio.v3 as iio

        iio.imwrite(tmp, np.stack([np.asarray(f) for f in frames]), fps=fps, codec="libx264")
    tmp.replace(out)
    return {"game": game, "decisions": len(frames), "score": g.score, "video": str(out)}
