"""Check every ready game of a layout and report every defect, one line each.

A defect is an :class:`AtariDataError` naming the file, the line (for records), the field and
what was expected. Validation never stops at the first defect and never raises on bad input.
"""

from __future__ import annotations

import json
import os
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from atari_data.errors import AtariDataError
from atari_data.layout import (
    EPISODES,
    META,
    READY,
    GameDir,
    list_games,
    read_file,
    replaced,
    swap_into_place,
    write_atomic,
)
from atari_data.layout.png import formats_of, frame_defect, is_intact, pillow_frame
from atari_data.layout.records import GameRules, record_line, side_paths
from atari_data.limits import check as check_size
from atari_data.limits import check_parsed, limit, read_bytes
from atari_data.schema import META as META_SCHEMA
from atari_data.schema import check_structure, frame_size
from laya_protocol.files import LINK
from laya_protocol.games import all_games, minimal_actions
from laya_protocol.names import SPLITS


@dataclass
class Report:
    games: list[GameDir] = field(default_factory=list)
    not_ready: list[GameDir] = field(default_factory=list)
    defects: list[AtariDataError] = field(default_factory=list)
    records: int = 0

    @property
    def ok(self) -> bool:
        return not self.defects


def validate(root, sources=None, games=None, images: bool = False) -> Report:
    """Validate every ready game under ``root`` (optionally only some sources and games)."""
    report = Report()
    linked: set[Path] = set()
    for g in list_games(root, sources, games, ready_only=False):
        source = g.root / g.source
        if source.is_symlink() and source not in linked:  # once, not once per game in it
            linked.add(source)
            report.defects.append(AtariDataError(LINKED, file=str(source), field="(folder)"))
        if not g.ready:
            report.not_ready.append(g)
            continue
        report.games.append(g)
        try:  # readers take no lock: a writer may swap the game in anew while it is checked
            pin = g.pin()
        except OSError:  # gone since it was listed: the swap's middle
            report.defects.append(replaced(g.path, "validated", "validate"))
            continue
        before = len(report.defects)
        try:
            _GameCheck(g, images, report).run()
            whole = pin.same()  # asked while the folder is held open: no later one can have its inode
        finally:
            pin.close()
        if not whole:  # its defects may be one version's records against the other's meta.json
            del report.defects[before:]
            report.defects.append(pin.replaced("validated", "validate"))
    return report


def check_game(g: GameDir, images: bool = True) -> list[AtariDataError]:
    """Every defect of one game folder, ready or not (writers check a staged game with it)."""
    report = Report()
    _GameCheck(g, images, report).run()
    return report.defects


class _GameCheck:
    def __init__(self, g: GameDir, images: bool, report: Report):
        self.g, self.images, self.report = g, images, report
        self.linked: set[str] = set()  # names in images/ that are symbolic links
        self.linked_files: set[Path] = set()  # the game's own files that are, named once and not read

    def defect(self, file: Path, field: str, msg: str, line: int | None = None) -> None:
        self.report.defects.append(AtariDataError(msg, file=str(file), line=line, field=field))

    def run(self) -> None:
        g = self.g
        for path in (g.path, g.path / "images"):
            if path.is_symlink():
                self.defect(path, "(folder)", LINKED)
        for path in (g.path / META, g.path / READY, g.path / EPISODES, *map(g.split_file, SPLITS)):
            if path.is_symlink():
                self.defect(path, "(file)", LINKED)
                self.linked_files.add(path)
        meta_path = g.path / META
        meta = self._meta(meta_path)
        actions = meta.get("actions")
        if not _is_str_list(actions):
            actions = list(minimal_actions(g.game)) if g.game in all_games() else ["NOOP"]
        # A meta.json not read, or without a valid frames, leaves it unknown: the records' previous
        # frames are then judged by name, not by a count that would blame every record for it.
        frames = meta["frames"] if meta.get("frames") in (1, 2) else None
        rules = GameRules(g.source, g.game, tuple(actions or ()), frames, str(meta.get("platform", "ale")))
        size = frame_size(meta.get("frame_format"))

        present: set[str] = set()
        if not (g.path / "images").is_symlink():
            try:
                with os.scandir(g.path / "images") as entries:
                    for e in entries:
                        (self.linked if e.is_symlink() else present).add("images/" + e.name)
            except OSError:
                self.defect(g.path / "images", "(folder)", "is missing")
        ids: set[str] = set()
        seen = {split: self._split(split, rules, present, ids, size) for split in SPLITS}
        train_eps, val_eps = (read[1] if (read := seen[split]) else set() for split in ("train", "val"))
        both = train_eps & val_eps
        if both:
            self.defect(
                g.split_file("val"),
                "episode",
                f"episodes {sorted(both)[:5]} are in both train and val (expected disjoint)",
            )
        self._meta_matches(meta_path, meta, seen)

    def _meta(self, path: Path) -> dict:
        if path in self.linked_files:
            return {}
        try:
            text = read_bytes(path, follow=False)
            check_parsed(len(text), file=str(path))  # held parsed whole: some 30 times its text
            meta = orjson.loads(text)
        except FileNotFoundError:
            self.defect(path, "(file)", "is missing")
            return {}
        except AtariDataError as e:
            self.report.defects.append(e)
            return {}
        except orjson.JSONDecodeError as e:
            self.defect(path, "(file)", f"is not valid JSON ({e})")
            return {}
        for f, msg in check_structure(meta, META_SCHEMA):
            self.defect(path, f, msg)
        if not isinstance(meta, dict):
            return {}
        g = self.g
        for key, folder in (("source", g.source), ("game", g.game)):
            if key in meta and meta[key] != folder:
                self.defect(path, key, f"{meta[key]!r} does not match the folder (expected {folder!r})")
        if meta.get("platform", "ale") == "ale":
            if g.game not in all_games():
                self.defect(path, "game", f"{g.game!r} is not an ALE v5 game")
            elif _is_str_list(meta.get("actions")) and meta["actions"] != list(minimal_actions(g.game)):
                self.defect(
                    path,
                    "actions",
                    f"{meta['actions']} differ from the ALE minimal set (expected {list(minimal_actions(g.game))})",
                )
        return meta

    def _split(
        self, split: str, rules: GameRules, present: set, ids: set, size
    ) -> tuple[int, set[int], Counter] | None:
        """A split's record count, episodes and labels; None when the file could not be read."""
        path = self.g.split_file(split)
        label_counts = [0] * len(rules.actions)
        episodes: set[int] = set()
        n = 0
        if path in self.linked_files:
            return None
        try:
            data = read_bytes(path, follow=False)
        except AtariDataError as e:
            self.report.defects.append(e)
            return None
        except OSError:
            self.defect(path, "(file)", "is missing")
            return None
        # Split on newlines only: JSON text may hold other line separators (U+2028) verbatim.
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()
        check, loads, images, n_ids = rules.check, orjson.loads, self.images, len(ids)
        record_cap = limit("record")
        for n, line in enumerate(lines, 1):
            if len(line) > record_cap:  # refused before it is parsed, into up to 30 times its size
                try:
                    check_size("record", len(line), file=str(path), line=n, field="(record)")
                except AtariDataError as e:
                    self.report.defects.append(e)
                    continue
            try:
                rec = loads(line)
            except orjson.JSONDecodeError as e:
                self.defect(path, "(record)", f"is not valid JSON ({e})", n)
                continue
            # A line written back as the writer writes it holds no key twice (1 us); any other is parsed
            # again, keys kept.
            try:
                same = record_line(rec) == line
            except TypeError:  # nested past orjson's writer (254 levels): the schema's depth check says so
                same = False
            if not same and (twice := repeated_key(line)):
                self.defect(path, twice, REPEATED, n)
            bad = check(rec)
            if bad:
                for fld, msg in bad:
                    self.defect(path, fld, msg, n)
                # Count what can still be trusted, so one bad field does not cascade.
                if type(rec) is not dict or any(fld in _KEY_FIELDS for fld, _ in bad):
                    continue
            ids.add(rec["id"])
            n_ids += 1
            if len(ids) != n_ids:
                n_ids -= 1
                self.defect(path, "id", f"{rec['id']!r} is repeated (ids must be unique per game)", n)
            episodes.add(rec["episode"])
            label = rec.get("label")
            if type(label) is int and 0 <= label < len(label_counts):
                label_counts[label] += 1
            side = side_paths(rec)
            if side:
                self._side_images(side, path, n, present)
            image, prev = rec["image"], rec.get("prev_image")
            if (
                images
                or image not in present
                or (prev is not None and prev not in present)
                or (prev is not None and rec["step"] == 0)
            ):
                self._frames(rec, path, n, present, size)
        self.report.records += n
        return n, episodes, Counter({a: c for a, c in zip(rules.actions, label_counts, strict=True) if c})

    def _frames(self, rec: dict, path: Path, n: int, present: set, size) -> None:
        names = [("image", rec["image"])]
        if isinstance(rec.get("prev_image"), str):
            names.append(("prev_image", rec["prev_image"]))
        for fld, rel in names:
            if rel not in present:
                self.defect(path, fld, f"{rel} {self._absent(rel)}", n)
            elif self.images and size is not None:
                self._decode(self.g.path / rel, path, n, fld, size)
        if rec["step"] == 0 and len(names) == 2 and all(r in present for _, r in names):
            a, b = (_frame_bytes(self.g.path / r) for _, r in names)  # each file read once
            if a != b and _pixels(a, formats_of(names[0][1])) != _pixels(b, formats_of(names[1][1])):
                self.defect(
                    path,
                    "prev_image",
                    "differs from image on the episode's first step (expected a copy of the current frame)",
                    n,
                )

    def _side_images(self, side: dict[str, str], path: Path, n: int, present: set) -> None:
        """Images the provenance names beside the frame (pack carries them): present, and with
        ``--images`` whole images of the format their names say (any size)."""
        for name, rel in side.items():
            fld = f"provenance.{name!r}"
            if rel not in present:
                self.defect(path, fld, f"{rel!r} {self._absent(rel)}", n)
            elif self.images:
                try:
                    ok = is_intact(read_file(self.g.path / rel, "frame", fld), None, formats_of(rel))
                except AtariDataError as e:
                    self.defect(path, fld, f"{rel!r} {e.message}", n)
                    continue
                if not ok:
                    self.defect(path, fld, f"{rel!r} is not an intact image", n)

    def _absent(self, rel: str) -> str:
        return LINKED if rel in self.linked else "does not exist"

    def _decode(self, file: Path, path: Path, n: int, fld: str, size) -> None:
        try:
            data = read_bytes(file, "frame", fld)
        except Exception as e:  # noqa: BLE001 - unreadable is a defect of this file
            self.defect(path, fld, f"{file.name} does not decode ({type(e).__name__}: {e})", n)
            return
        why = frame_defect(data, formats_of(file.name), size)
        if why:
            self.defect(path, fld, f"{file.name} {why}", n)

    def _meta_matches(self, path: Path, meta: dict, seen: dict) -> None:
        caps = meta["caps"] if isinstance(meta.get("caps"), dict) else {}
        for split in SPLITS:
            if seen[split] is None:  # not read: its defect is named, and nothing is compared with it
                continue
            count, episodes, labels = seen[split]
            cap = caps.get(split)
            if isinstance(cap, int) and count > cap:
                self.defect(self.g.split_file(split), "(records)", f"{count} records exceed the cap {cap}")
            stated = meta.get(split)
            if not isinstance(stated, dict):
                continue
            for key, actual in (("records", count), ("episodes", len(episodes))):
                if key in stated and stated[key] != actual:
                    self.defect(path, f"{split}.{key}", f"says {stated[key]}, the records have {actual}")
            if isinstance(stated.get("labels"), dict) and stated["labels"] != {k: v for k, v in labels.items() if v}:
                self.defect(path, f"{split}.labels", f"{stated['labels']} differ from the records' {dict(labels)}")


LINKED = f"is {LINK} (a layout is plain files and folders: pack would publish what a link points at)"
_KEY_FIELDS = frozenset(("id", "image", "prev_image", "episode", "step"))


def _is_str_list(v) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)


def _frame_bytes(path: Path) -> bytes | None:
    try:
        return read_bytes(path, "frame", "image")
    except (OSError, AtariDataError):
        return None


REPEATED = "is given twice (JSON readers disagree on which one counts)"


def repeated_key(text: bytes) -> str | None:
    """The path (``question.type``) of a key that an object of a JSON text gives twice, the outermost
    such object's first repeat, or None."""

    class Repeated(dict):
        key = ""

    def pairs(items: list) -> dict:
        out = dict(items)
        if len(out) == len(items):
            return out
        seen: set[str] = set()
        repeated = Repeated(items)
        repeated.key = next(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        return repeated

    try:
        todo = deque([("", json.loads(text, object_pairs_hook=pairs))])
    except (ValueError, RecursionError):
        return None  # not this check's to say: orjson read it
    while todo:  # breadth first: the outermost repeat is named
        where, v = todo.popleft()
        if isinstance(v, Repeated):
            return f"{where}.{v.key}" if where else v.key
        if isinstance(v, dict):
            todo += [(f"{where}.{k}" if where else k, x) for k, x in v.items()]
        elif isinstance(v, list):
            todo += [(f"{where}[{i}]", x) for i, x in enumerate(v)]
    return None


def _pixels(data: bytes | None, formats: tuple[str, ...]):
    if data is None:
        return object()  # a missing frame, like an unreadable one, equals no other
    try:
        im = pillow_frame(data, formats)
    except ValueError:  # an unreadable frame never equals another
        return object()
    return im.mode, im.size, im.tobytes()


def commit_game(staged: GameDir, images: bool, file: str) -> Path:
    """Validate a staged game as ``atari-data validate`` would (decoding frames with ``images``), swap
    it into ``<root>/<source>/<Game>`` and mark it ready; returns the final folder. Nothing is marked
    ready that does not validate: a defect is one AtariDataError naming the first."""
    defects = check_game(staged, images=images)
    if defects:
        raise AtariDataError(
            f"the assembled game does not validate ({len(defects)} defects), e.g. {defects[0].render()}",
            file=file,
            field="(game)",
        )
    final = staged.root.parent / staged.game  # the stage lives in <root>/<source>/, beside the game
    # Ready before it is swapped in: marked after, the game was there without _READY while the old one
    # was deleted (seconds), and a pack or a training run then left it out as not ready
    write_atomic(staged.path / READY, b"")
    swap_into_place(staged.path, final)
    return final
