"""PlayJev (``OmniJev/PlayJev-data``, Apache-2.0): browser games -> sources ``playjev_<round>``.

A local copy holds ``<game>/<round>_<shard>/records.jsonl`` (one decision per line) with the frames
in place once PlayJev's rebuild has run (frames are not in the download). Only records whose frame
exists and whose MD5 matches ``frame_md5`` are imported; the rest are counted. Not ALE: the
platform is ``browser`` (meta.json), the options are the record's own ``actions`` and the question
says "browser game". ``teacher_probs`` -> ``target``, ``teacher_action`` -> ``label``;
``taken_action``, ``actor``, ``score``, ``reward``, ``done``, ``t``, the seed, shard and the
source's own episode and step go to provenance. Moves may be names or indices into ``actions``;
anything else is a counted drop. When an episode's first steps are dropped, the first step kept
opens it: as on every episode's first decision, its previous frame is its own. Each round
(``clone``, ``dagger1``, ...) is its own source, and episodes go to val by whole episodes (about 5%).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

from PIL import Image

from atari_data import limits
from atari_data.errors import AtariDataError
from atari_data.layout import join_plain, read_jsonl
from atari_data.layout.writer import GameWriter, Step, assign_splits
from atari_data.schema.types import JSONValue

REPO = "OmniJev/PlayJev-data"
ORIGIN = REPO
LICENSE = "Apache-2.0 (frames: each game's own licence)"
PLATFORM = "browser"
REQUIRED = ("episode", "step", "frame", "frame_md5", "actions", "teacher_action", "taken_action")
CARRIED = ("actor", "score", "reward", "done", "t", "seed")  # copied to provenance as they are
_CARRIED_TYPE = JSONValue()  # what a provenance value may be (the record schema's type for them)


def game_name(slug: str) -> str:
    """``floppy_bird`` -> ``FloppyBird`` (record ids keep game names alphanumeric)."""
    return "".join(part[:1].upper() + part[1:] for part in slug.replace("-", "_").split("_"))


def rounds_of(root: Path, slug: str) -> dict[str, list[Path]]:
    """Shard folders by round: ``clone_a``, ``clone_c`` -> {"clone": [...]}."""
    out: dict[str, list[Path]] = {}
    for shard in sorted(p for p in (root / slug).iterdir() if (p / "records.jsonl").is_file()):
        out.setdefault(shard.name.rsplit("_", 1)[0], []).append(shard)
    return out


def available_games(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("*/records.jsonl")))


def _move(value, actions: list[str]) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(actions):
        return value
    if isinstance(value, str) and value in actions:
        return actions.index(value)
    return None


def _read_shard(shard: Path) -> dict[object, list[tuple[int, dict]]]:
    """Records by the source's episode, in first-appearance order, each episode by step."""
    path = shard / "records.jsonl"
    episodes: dict[object, list[tuple[int, dict]]] = {}
    if path.is_file():  # every record is held parsed; a missing file is read_jsonl's one line
        limits.check_parsed(path.stat().st_size, file=str(path))
    for n, rec in read_jsonl(path):
        missing = [k for k in REQUIRED if k not in rec] if isinstance(rec, dict) else ["(record)"]
        if missing:
            raise AtariDataError(f"missing {missing}", file=str(path), line=n, field=missing[0])
        for key in ("episode", "step"):
            if type(rec[key]) is not int or not 0 <= rec[key] < 2**31:
                raise AtariDataError(f"{rec[key]!r} is not an integer in 0..2^31-1", file=str(path), line=n, field=key)
        for key in ("frame", "prev_frame"):
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise AtariDataError(f"{rec[key]!r} is not a path", file=str(path), line=n, field=key)
        for key in CARRIED:  # what the layout could not hold (NaN, a 400-digit seed) is this line's error
            bad: list = []
            _CARRIED_TYPE.check(rec.get(key), key, bad)
            if bad:
                raise AtariDataError(bad[0][1], file=str(path), line=n, field=bad[0][0])
        episodes.setdefault(rec["episode"], []).append((n, rec))
    for steps in episodes.values():
        steps.sort(key=lambda x: x[1]["step"])
        for (_, a), (n, b) in zip(steps, steps[1:], strict=False):
            if a["step"] == b["step"]:  # one step twice would be two records of one decision
                raise AtariDataError(
                    f"episode {b['episode']} step {b['step']} appears twice", file=str(path), line=n, field="step"
                )
    if not episodes:
        raise AtariDataError("holds no records", file=str(path), field="(file)")
    return episodes


def import_round(
    root: str | Path,
    out: str | Path,
    slug: str,
    round_: str,
    caps: dict | None = None,
    force: bool = False,
    progress=None,
) -> dict | None:
    """Write ``<out>/playjev_<round>/<Game>``; returns its meta.json (None when already complete)."""
    root = Path(root)
    shards = rounds_of(root, slug).get(round_)
    if not shards:
        raise AtariDataError(f"no {round_}_<shard>/records.jsonl", file=str(root / slug))
    episodes = [(shard, ep, steps) for shard in shards for ep, steps in _read_shard(shard).items()]
    shard, _, ((line, first), *_) = episodes[0]
    actions = first["actions"]
    if not (isinstance(actions, list) and actions and all(isinstance(a, str) for a in actions)) or len(
        set(actions)
    ) != len(actions):
        raise AtariDataError(
            f"actions {actions!r} (expected move names, each once)",
            file=str(shard / "records.jsonl"),
            line=line,
            field="actions",
        )
    frame_format = _frame_format(episodes)
    with GameWriter(
        out,
        f"playjev_{round_}",
        game_name(slug),
        frame_format=frame_format,
        frames=2,
        actions=actions,
        platform=PLATFORM,
        origin=f"{REPO} ({slug}/{round_})",
        license=LICENSE,
        force=force,
        progress=progress,
        caps=caps or {},  # the writer fills what is missing with its DEFAULT_CAPS
    ) as writer:
        if writer.complete:
            return None
        splits = assign_splits(range(len(episodes)))
        for i, (shard, _, steps) in enumerate(episodes):
            writer.add_episode(i, splits[i], _steps(shard, steps, actions, writer))
        return writer.finish()


def _frame_format(episodes) -> str:
    """``rgb_<h>x<w>`` of the first frame on disk (every frame is checked against it on validate)."""
    for shard, _, steps in episodes:
        for line, rec in steps:
            path = _frame_path(shard, line, rec, "frame")
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= limits.limit("frame"):
                try:
                    with Image.open(path) as im:
                        return f"{'gray' if im.mode == 'L' else 'rgb'}_{im.height}x{im.width}"
                except (OSError, Image.DecompressionBombError):  # dropped as bad_frame when its step comes
                    continue
    raise AtariDataError(
        "no frame on disk: run PlayJev's rebuild (python -m playjev.rebuild DATA) first",
        file=str(episodes[0][0]),
        field="frame",
    )


def _frame_path(shard: Path, line: int, rec: dict, key: str) -> Path:
    """A record's frame file, never outside its shard; a path that leaves it names its line."""
    try:
        return Path(join_plain(str(shard), rec[key], key))
    except AtariDataError as e:
        raise AtariDataError(e.message, file=str(shard / "records.jsonl"), line=line, field=key) from None


def _steps(shard: Path, steps, actions: list[str], writer: GameWriter):
    path = shard / "records.jsonl"
    opened = False  # whether a step of this episode was kept: the first one kept is the layout's step 0
    for line, rec in steps:
        if rec.get("actions") != actions:
            raise AtariDataError(
                f"actions {rec.get('actions')} differ from the round's {actions}",
                file=str(path),
                line=line,
                field="actions",
            )
        label, taken = _move(rec["teacher_action"], actions), _move(rec["taken_action"], actions)
        if label is None or taken is None:
            writer.drop("bad_move")
            continue
        frame = _frame_path(shard, line, rec, "frame")
        if not frame.is_file():
            writer.drop("frame_missing")
            continue
        data = limits.read_bytes(frame, "frame", "frame", follow=False)  # a link would reach past the shard
        if hashlib.md5(data).hexdigest() != rec["frame_md5"]:
            writer.drop("frame_md5_mismatch")
            continue
        if writer.frame_defect(data):
            writer.drop("bad_frame")
            continue
        prev = None
        if rec.get("prev_frame") and opened:  # step 0's previous frame is its own (the layout's rule)
            p = _frame_path(shard, line, rec, "prev_frame")
            if not p.is_file():
                writer.drop("prev_frame_missing")
                continue
            prev = limits.read_bytes(p, "frame", "prev_frame", follow=False)  # it has no MD5 to check
            if writer.frame_defect(prev):
                writer.drop("bad_prev_frame")
                continue
        probs = rec.get("teacher_probs")
        if probs is not None and (
            not isinstance(probs, list)
            or len(probs) != len(actions)
            or not all(isinstance(x, (int, float)) and x >= 0 for x in probs)
            or abs(sum(probs) - 1) > 1e-4
        ):
            writer.drop("bad_teacher_probs")
            continue
        opened = True
        yield Step(
            frame=data,
            label=label,
            target=probs,
            prev_frame=prev,
            provenance={
                "taken_action": actions[taken],
                **{key: rec.get(key) for key in CARRIED},
                "shard": shard.name,
                "source_episode": rec["episode"],
                "source_step": rec["step"],
            },
        )


# -- the Importer interface (atari_data.produce.importing.Importer) ----------------------------------
# Browser games: a unit is (folder slug, round), each round its own source (playjev_<round>).


def units(root: Path, games: Sequence[str] | None) -> list[tuple[str, str]]:
    slugs = available_games(root)
    if games:  # a slug or its game name, in any case: FloppyBird, floppy_bird

        def key(name: str) -> str:
            return name.lower().replace("_", "")

        if lacking := [g for g in games if key(g) not in {key(s) for s in slugs}]:
            raise AtariDataError(
                f"{', '.join(lacking)}: not in this copy (it has {', '.join(slugs) or 'no games'})",
                file=str(root),
                field="--games",
            )
        slugs = [s for s in slugs if key(s) in {key(g) for g in games}]
    return [(slug, round_) for slug in slugs for round_ in rounds_of(root, slug)]


def output(slug: str, round_: str) -> str:
    return f"playjev_{round_}/{game_name(slug)}"


def run(root: str | Path, out: str | Path, slug: str, round_: str, caps: dict, force: bool, progress) -> dict | None:
    return import_round(root, out, slug, round_, caps=caps, force=force, progress=progress)
