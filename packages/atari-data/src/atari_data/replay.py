"""Replay-packed datasets: share the decisions, rebuild the screens locally.

ALE is deterministic given the seed and the moves, so a played source can be shared without its
frames. ``atari-data pack --replay`` writes, per game::

    replay/<source>/<Game>/meta.json        as in the layout (env id and protocol included)
    replay/<source>/<Game>/episodes.jsonl   {"episode", "split", "seed", "moves", "decisions"} per episode
    replay/<source>/<Game>/{train,val}.jsonl
        {"record": <the record>, "md5": {"image": ..., "prev_image": ...}}

``moves`` are minimal-set action indices, one per decision step of the emulator (``frameskip``
frames), auto-FIREs included; ``decisions`` are their positions that were decisions. An MD5 is of
a frame's pixels (uint8, C order), so it does not depend on the PNG encoder.

``atari-data rebuild REPO --root DIR`` replays every episode, checks every frame against its MD5,
and writes each game whose frames all match as a ready layout game; a game with a mismatch is
reported and not written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import EPISODES, META, READY, SPLITS, GameDir, read_json, write_atomic
from atari_data.png import decode_png, encode_png
from atari_data.protocol import Protocol

REPLAY_DIR = "replay"


def pixel_md5(frame: np.ndarray) -> str:
    return hashlib.md5(np.ascontiguousarray(frame).tobytes()).hexdigest()


def write_replay_game(g: GameDir, dest: Path) -> int:
    """Replay-pack one layout game into ``dest``; returns its record count."""
    if not (g.path / EPISODES).is_file():
        raise AtariDataError(f"{g.source}/{g.game} has no {EPISODES}: only played sources (generate, DAgger) can be "
                             "replay-packed", file=str(g.path), field="--replay")
    dest.mkdir(parents=True)
    shutil.copyfile(g.path / META, dest / META)
    shutil.copyfile(g.path / EPISODES, dest / EPISODES)
    n = 0
    for split in SPLITS:
        lines = []
        for rec in g.records(split):
            md5 = {k: pixel_md5(decode_png((g.path / rec[k]).read_bytes()))
                   for k in ("image", "prev_image") if k in rec}
            lines.append(json.dumps({"record": rec, "md5": md5}, ensure_ascii=False, separators=(",", ":")))
        (dest / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        n += len(lines)
    return n


@dataclass
class GameRebuild:
    source: str
    game: str
    frames: int = 0
    matched: int = 0
    mismatched: list[str] = field(default_factory=list)
    written: bool = False


def _episode_frames(meta: dict, game: str, ep: dict, wanted: set[int]) -> dict[int, np.ndarray]:
    from atari_data.play import AtariGame

    p = meta.get("protocol")
    if not p:
        raise AtariDataError("has no protocol: cannot replay", field="protocol")
    protocol = Protocol(**p)
    g = AtariGame(game, protocol)
    out = {}
    for t, frame in enumerate(g.replay(ep["seed"], ep["moves"], ep["decisions"])):
        if t in wanted:
            out[t] = frame.copy()
    return out


def rebuild_game(src: Path, source: str, game: str, root: Path) -> GameRebuild:
    """Rebuild ``<root>/<source>/<game>`` from a replay-packed game folder ``src``."""
    res = GameRebuild(source, game)
    meta = read_json(src / META)
    episodes = {}
    for n, line in enumerate((src / EPISODES).read_text().splitlines(), 1):
        try:
            ep = json.loads(line)
            episodes[ep["episode"]] = ep
        except (ValueError, KeyError, TypeError):
            raise AtariDataError("is not an episode line", file=str(src / EPISODES), line=n, field="(episode)") \
                from None
    rows = {s: [json.loads(line) for line in (src / f"{s}.jsonl").read_text().splitlines()] for s in SPLITS}
    by_episode: dict[int, list[dict]] = {}
    for s in SPLITS:
        for row in rows[s]:
            by_episode.setdefault(row["record"]["episode"], []).append(row)

    parent = root / source
    tmp = parent / f".{game}.rebuild"
    if tmp.exists():
        shutil.rmtree(tmp)
    (tmp / "images").mkdir(parents=True)
    for number, recs in sorted(by_episode.items()):
        ep = episodes.get(number)
        if ep is None:
            raise AtariDataError(f"episode {number} has records but no moves", file=str(src / EPISODES),
                                 field="episode")
        decisions = ep["decisions"]
        wanted = {r["record"]["step"] for r in recs} | {r["record"]["step"] - 1 for r in recs if r["record"]["step"]}
        frames = _episode_frames(meta, game, ep, wanted)
        for row in recs:
            rec, t = row["record"], row["record"]["step"]
            images = {"image": frames.get(t)}
            if "prev_image" in rec:
                fresh = t == 0 or decisions[t] - 1 != decisions[t - 1]  # first, or right after an auto-FIRE
                images["prev_image"] = images["image"] if fresh else frames.get(t - 1)
            for key, frame in images.items():
                res.frames += 1
                if frame is not None and pixel_md5(frame) == row["md5"].get(key):
                    res.matched += 1
                    (tmp / rec[key]).write_bytes(encode_png(frame))
                else:
                    res.mismatched.append(f"{rec['id']}:{key}")
    if res.mismatched:
        shutil.rmtree(tmp)
        return res
    for s in SPLITS:
        text = "".join(json.dumps(r["record"], ensure_ascii=False, separators=(",", ":"), allow_nan=False) + "\n"
                       for r in rows[s])
        (tmp / f"{s}.jsonl").write_text(text, encoding="utf-8")
    shutil.copyfile(src / META, tmp / META)
    shutil.copyfile(src / EPISODES, tmp / EPISODES)
    final = parent / game
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    write_atomic(final / READY, b"")
    res.written = True
    return res


def rebuild(repo: str | Path, root: str | Path) -> list[GameRebuild]:
    """Rebuild every replay-packed game of ``repo`` into the layout ``root``."""
    base = Path(repo) / REPLAY_DIR
    if not base.is_dir():
        raise AtariDataError(f"has no {REPLAY_DIR}/ folder (pack it with --replay)", file=str(repo), field="repo")
    out = []
    for game_dir in sorted(p for p in base.glob("*/*") if p.is_dir()):
        out.append(rebuild_game(game_dir, game_dir.parent.name, game_dir.name, Path(root)))
    return out
