"""Replay-packed datasets: share the decisions, rebuild the screens locally.

ALE is deterministic given the seed and the moves, so a played source can be shared without its
frames. ``atari-data pack --replay`` writes, per game::

    replay/<source>/<Game>/meta.json        as in the layout (env id and protocol included)
    replay/<source>/<Game>/episodes.jsonl   one line per episode (layout.EPISODE_KEYS)
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
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from atari_data.errors import AtariDataError
from atari_data.layout import (
    EPISODE_KEYS,
    EPISODES,
    META,
    GameDir,
    GameLock,
    copy_plain,
    read_json,
    read_jsonl,
    split_file_name,
    staged_game,
)
from atari_data.layout.png import encode_png
from atari_data.layout.records import GameRules, record_line
from atari_data.layout.validate import commit_game
from atari_data.play.ale import EPISODE_SEED_MAX
from atari_data.publish.repo import REPLAY, check_out_root
from atari_data.schema import GAME_RE, SOURCE_RE, check_structure
from atari_data.schema import META as META_SCHEMA
from laya_protocol.files import write_file
from laya_protocol.games import all_games, minimal_actions
from laya_protocol.names import SPLITS
from laya_protocol.protocol import Protocol


def pixel_md5(frame: np.ndarray) -> str:
    return hashlib.md5(np.ascontiguousarray(frame).tobytes()).hexdigest()


def write_replay_game(g: GameDir, dest: Path) -> int:
    """Replay-pack one layout game into ``dest``; returns its record count."""
    if not (g.path / EPISODES).is_file():
        raise AtariDataError(
            f"{g.source}/{g.game} has no {EPISODES}: only played sources (generate, DAgger) can be replay-packed",
            file=str(g.path),
            field="--replay",
        )
    dest.mkdir(parents=True)
    copy_plain(g.path / META, dest / META)
    copy_plain(g.path / EPISODES, dest / EPISODES)
    n = 0
    for split in SPLITS:
        lines = []
        for rec in g.records(split):
            md5 = {k: pixel_md5(g.frame(rec, prev=k == "prev_image")) for k in ("image", "prev_image") if k in rec}
            lines.append(json.dumps({"record": rec, "md5": md5}, ensure_ascii=False, separators=(",", ":")))
        write_file(dest / split_file_name(split), "".join(line + "\n" for line in lines))
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


def _episode_frames(protocol: Protocol, game: str, ep: dict, wanted: set[int]) -> dict[int, np.ndarray]:
    from atari_data.play.ale import AtariGame

    g = AtariGame(game, protocol)
    out = {}
    for t, frame in enumerate(g.replay(ep["seed"], ep["moves"], ep["decisions"])):
        if t in wanted:
            out[t] = frame.copy()
    return out


def _is_int(v, lo: int = 0, hi: int = 2**31 - 1) -> bool:
    return type(v) is int and lo <= v <= hi


def _read_protocol(meta: dict, game: str, path: Path) -> Protocol:
    defects = check_structure(meta, META_SCHEMA)
    if defects:
        f, msg = defects[0]
        raise AtariDataError(msg, file=str(path), field=f)
    p = meta.get("protocol")
    if not p:
        raise AtariDataError("has no protocol: cannot replay", file=str(path), field="protocol")
    if meta["game"] != game or game not in all_games():
        raise AtariDataError(
            f"game {meta['game']!r} in folder {game!r}: expected an ALE v5 game equal to its folder",
            file=str(path),
            field="game",
        )
    protocol = Protocol(**p)
    for name in ("frameskip", "max_frames_per_episode"):  # ALE's setInt takes a C int
        if not _is_int(getattr(protocol, name)):
            raise AtariDataError(
                f"{getattr(protocol, name)} is past what ALE takes ({2**31 - 1})",
                file=str(path),
                field=f"protocol.{name}",
            )
    if protocol.env_id != f"ALE/{game}-v5":
        raise AtariDataError(f"{protocol.env_id!r} is not ALE/{game}-v5", file=str(path), field="protocol.env_id")
    if not 0.0 <= protocol.repeat_action_probability <= 1.0:
        raise AtariDataError(
            f"{protocol.repeat_action_probability} is not a probability",
            file=str(path),
            field="protocol.repeat_action_probability",
        )
    if meta["actions"] != list(minimal_actions(game)):
        raise AtariDataError(f"{meta['actions']} differ from the ALE minimal set", file=str(path), field="actions")
    return protocol


def _read_episodes(path: Path, protocol: Protocol, n_actions: int) -> dict[int, dict]:
    """Every episode line checked before any is played: ints where ints belong, moves within the
    action set and the protocol's frame cap, decisions increasing positions among the moves."""
    max_moves = protocol.max_frames_per_episode // protocol.frameskip
    episodes: dict[int, dict] = {}
    for n, ep in read_jsonl(path, "(episode)"):

        def bad(field: str, msg: str, n=n):
            return AtariDataError(msg, file=str(path), line=n, field=field)

        if not isinstance(ep, dict):
            raise bad("(episode)", "is not a JSON object")
        if extra := sorted(ep.keys() - set(EPISODE_KEYS)):
            raise bad(extra[0], f"is not a key of an episode line ({', '.join(EPISODE_KEYS)})")
        for key, hi in (("episode", 2**31 - 1), ("seed", EPISODE_SEED_MAX)):
            if not _is_int(ep.get(key), 0, hi):
                raise bad(key, f"{ep.get(key)!r} is not an integer in 0..{hi}" if key in ep else "is missing")
        moves, decisions = ep.get("moves"), ep.get("decisions")
        if not isinstance(moves, list) or not all(_is_int(m, 0, n_actions - 1) for m in moves):
            raise bad("moves", f"is not a list of action indices 0..{n_actions - 1}")
        if len(moves) > max_moves:
            raise bad(
                "moves",
                f"{len(moves)} moves exceed the protocol's {max_moves} "
                f"({protocol.max_frames_per_episode} frames / frameskip {protocol.frameskip})",
            )
        if (
            not isinstance(decisions, list)
            or not all(_is_int(d, 0, len(moves) - 1) for d in decisions)
            or any(a >= b for a, b in zip(decisions, decisions[1:], strict=False))
        ):
            raise bad("decisions", "is not an increasing list of positions among the moves")
        if ep.get("split") not in SPLITS:
            raise bad("split", f"{ep.get('split')!r} is not one of {', '.join(SPLITS)}")
        if ep["episode"] in episodes:
            raise bad("episode", f"episode {ep['episode']} is repeated")
        episodes[ep["episode"]] = ep
    return episodes


def _read_rows(src: Path, rules: GameRules, episodes: dict[int, dict]) -> dict[str, list[dict]]:
    """Every record checked as the validator checks it (ids, image paths inside the game folder,
    labels, targets), and against its episode, before a single frame is written."""
    rows: dict[str, list[dict]] = {}
    for split in SPLITS:
        path = src / split_file_name(split)
        rows[split] = []
        for n, row in read_jsonl(path, "(record)"):
            if (
                not isinstance(row, dict)
                or not isinstance(row.get("record"), dict)
                or not isinstance(row.get("md5"), dict)
            ):
                raise AtariDataError('is not {"record": {...}, "md5": {...}}', file=str(path), line=n, field="(record)")
            rec = row["record"]
            defects = rules.check(rec)
            if defects:
                f, msg = defects[0]
                raise AtariDataError(msg, file=str(path), line=n, field=f)
            ep = episodes.get(rec["episode"])
            if ep is None:
                raise AtariDataError(
                    f"episode {rec['episode']} has records but no moves", file=str(path), line=n, field="episode"
                )
            if ep["split"] != split:  # copied into the rebuilt layout: it must say where the records are
                raise AtariDataError(
                    f"episode {rec['episode']} is a {ep['split']} episode, and has records in {path.name}",
                    file=str(src / EPISODES),
                    field="split",
                )
            if rec["step"] >= len(ep["decisions"]):
                raise AtariDataError(
                    f"step {rec['step']} is past the episode's {len(ep['decisions'])} decisions",
                    file=str(path),
                    line=n,
                    field="step",
                )
            rows[split].append(row)
    return rows


@dataclass
class ReplayGame:
    """A replay-packed game folder, read and checked: everything but its frames' MD5s, which only
    playing it can check."""

    meta: dict
    protocol: Protocol
    episodes: dict[int, dict]
    rows: dict[str, list[dict]]


def read_replay_game(src: Path, source: str, game: str) -> ReplayGame:
    """Every check a rebuild makes before the emulator runs (doctor makes them too); the first
    defect is an AtariDataError naming the file, the line and the field."""
    if not SOURCE_RE.match(source) or not GAME_RE.match(game):
        raise AtariDataError("is not <source>/<Game>", file=str(src), field="(folder)")
    meta = read_json(src / META)
    protocol = _read_protocol(meta, game, src / META)
    rules = GameRules(source, game, tuple(meta["actions"]), meta["frames"], meta["platform"])
    episodes = _read_episodes(src / EPISODES, protocol, len(rules.actions))
    return ReplayGame(meta, protocol, episodes, _read_rows(src, rules, episodes))


def rebuild_game(src: Path, source: str, game: str, root: Path) -> GameRebuild:
    """Rebuild ``<root>/<source>/<game>`` from a replay-packed game folder ``src``.

    Everything is checked before the emulator runs; the game is assembled in a staging folder,
    validated there as ``atari-data validate --images`` would, and only then swapped into place
    and marked ready, under the game's lock.
    """
    res = GameRebuild(source, game)
    packed = read_replay_game(src, source, game)
    by_episode: dict[int, list[dict]] = {}
    for s in SPLITS:
        for row in packed.rows[s]:
            by_episode.setdefault(row["record"]["episode"], []).append(row)

    with GameLock(root, source, game), staged_game(root, source, game, "rebuild") as staged:
        _write_frames(staged.path, packed.protocol, game, packed.episodes, by_episode, res)
        if res.mismatched:
            return res
        for s in SPLITS:
            text = b"".join(record_line(r["record"]) + b"\n" for r in packed.rows[s])
            write_file(staged.path / split_file_name(s), text)
        copy_plain(src / META, staged.path / META, follow=True)  # a Hub snapshot is links into its blobs
        copy_plain(src / EPISODES, staged.path / EPISODES, follow=True)
        commit_game(staged, images=True, file=str(src))
    res.written = True
    return res


def _write_frames(
    folder: Path, protocol: Protocol, game: str, episodes: dict, by_episode: dict, res: GameRebuild
) -> None:
    for number, recs in sorted(by_episode.items()):
        ep = episodes[number]
        decisions = ep["decisions"]
        wanted = {r["record"]["step"] for r in recs} | {r["record"]["step"] - 1 for r in recs if r["record"]["step"]}
        frames = _episode_frames(protocol, game, ep, wanted)
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
                    write_file(folder / rec[key], encode_png(frame))  # rec[key] is images/<id>...: checked
                else:
                    res.mismatched.append(f"{rec['id']}:{key}")


def rebuild(repo: str | Path, root: str | Path, force: bool = False) -> list[GameRebuild]:
    """Rebuild every replay-packed game of ``repo`` into the layout ``root``: never into the
    repository itself, and over a game ``root`` already holds only with ``force``."""
    check_out_root(str(root))
    root = Path(root)
    base = Path(repo) / REPLAY
    if not base.is_dir():
        raise AtariDataError(f"has no {REPLAY}/ folder (pack it with --replay)", file=str(repo), field="repo")
    r, o = Path(repo).resolve(), root.resolve()
    if r == o or r in o.parents:  # its layout games would replace the replay games they are built from
        raise AtariDataError(
            f"is inside the repository {repo}: rebuild into another folder", file=str(root), field="--root"
        )
    games = sorted(p for p in base.glob("*/*") if p.is_dir())
    there = [f"{g.parent.name}/{g.name}" for g in games if GameDir(root, g.parent.name, g.name).path.exists()]
    if there and not force:
        raise AtariDataError(
            f"already holds {', '.join(there)}; --force replaces {'it' if len(there) == 1 else 'them'}",
            file=str(root),
            field="--root",
        )
    return [rebuild_game(g, g.parent.name, g.name, root) for g in games]
