"""One record: how it is named, built and checked against its game.

The schema module says what a record looks like in general; :class:`GameRules` adds what it
must be within one (source, game) folder: its id, image paths, options, question and target.
The writer builds records with it and the validator checks them with it, so both agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from atari_data.questions import atari_question
from atari_data.schema import ID_RE, IMAGE_SUFFIXES, RECORD, Defect

TARGET_TOLERANCE = 1e-4


def record_id(source: str, game: str, episode: int, step: int) -> str:
    return f"{source}-{game}-e{episode:06d}-s{step:06d}"


def image_name(rid: str, suffix: str = ".png", prev: bool = False) -> str:
    """Path of a record's frame relative to the game folder."""
    return f"images/{rid}{'_prev' if prev else ''}{suffix}"


@dataclass
class GameRules:
    """What every record of one (source, game) folder must satisfy."""

    source: str
    game: str
    actions: tuple[str, ...]
    frames: int = 1
    question: dict = field(init=False)

    def __post_init__(self):
        self.actions = tuple(self.actions)
        self.question = atari_question(self.game, self.actions)["action"]
        self._actions_list = list(self.actions)
        self._skip = frozenset(("actions", "question"))

    def record(self, episode: int, step: int, label: int, target=None, provenance=None,
               suffix: str = ".png") -> dict:
        """Build a record in schema field order."""
        rid = record_id(self.source, self.game, episode, step)
        rec = {"id": rid, "image": image_name(rid, suffix)}
        if self.frames == 2:
            rec["prev_image"] = image_name(rid, suffix, prev=True)
        rec.update(game=self.game, actions=self._actions_list, label=label)
        if target is not None:
            rec["target"] = target
        rec.update(question=self.question, source=self.source, episode=episode, step=step)
        if provenance:
            rec["provenance"] = provenance
        return rec

    def check(self, rec) -> list[Defect]:
        """Every defect of one record, as (field, message) pairs; empty when it is valid."""
        out: list[Defect] = []
        if type(rec) is not dict:
            RECORD.check(rec, "", out)
            return out
        # The options and the question are long and almost always exactly right: compare them
        # with the expected values first and only take them apart when they differ.
        actions_ok = rec.get("actions") == self._actions_list
        question_ok = rec.get("question") == self.question
        RECORD.check(rec, "", out, self._skip if actions_ok and question_ok else frozenset())
        if out:
            return out
        if not actions_ok:
            out.append(("actions", f"{rec['actions']} differ from the game's action set "
                                   f"(expected {self._actions_list})"))
        if not question_ok:
            out.append(("question", "differs from atari_question(game, actions)['action']"))
        if rec["source"] != self.source:
            out.append(("source", f"{rec['source']!r} does not match the folder (expected {self.source!r})"))
        if rec["game"] != self.game:
            out.append(("game", f"{rec['game']!r} does not match the folder (expected {self.game!r})"))
        rid = rec["id"]
        expected_id = record_id(self.source, self.game, rec["episode"], rec["step"])
        if rid != expected_id:
            out.append(("id", f"{rid!r} does not match source, game, episode and step "
                              f"(expected {expected_id!r})"))
        image = rec["image"]
        if not (image.startswith("images/") and image[7:-4] == rid and image[-4:] in IMAGE_SUFFIXES):
            out.append(("image", f"{image!r} is not images/<id>.png or .jpg (expected "
                                 f"{image_name(rid)!r})"))
        prev = rec.get("prev_image")
        if self.frames == 2 and prev is None:
            out.append(("prev_image", "is missing (a two-frame source needs the previous frame)"))
        elif self.frames == 1 and prev is not None:
            out.append(("prev_image", "is present in a one-frame source (meta.json frames is 1)"))
        elif prev is not None and prev != image_name(rid, image[-4:], prev=True):
            out.append(("prev_image", f"{prev!r} is not images/<id>_prev{image[-4:]}"))
        n = len(self.actions)
        if rec["label"] >= n:
            out.append(("label", f"{rec['label']} is out of range (expected 0..{n - 1})"))
        target = rec.get("target")
        if target is not None:
            check_target(target, n, out)
        return out


def check_target(target: list, n: int, out: list[Defect]) -> None:
    if len(target) != n:
        out.append(("target", f"has {len(target)} values, expected {n} (one per action)"))
        return
    if any(x < 0 for x in target):
        out.append(("target", f"has a negative probability {min(target)}"))
        return
    total = math.fsum(target)
    if abs(total - 1.0) > TARGET_TOLERANCE:
        out.append(("target", f"sums to {total:.6g}, expected 1 (tolerance {TARGET_TOLERANCE:g})"))


def parse_id(rid: str) -> tuple[str, str, int, int] | None:
    m = ID_RE.match(rid)
    return (m[1], m[2], int(m[3]), int(m[4])) if m else None
