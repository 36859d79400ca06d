"""One record: how it is named, built and checked against its game.

The schema module says what a record looks like in general; :class:`GameRules` adds what it
must be within one (source, game) folder: its id, image paths, options, question and target.
The writer builds records with it and the validator checks them with it, so both agree.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import orjson

from atari_data.schema import IMAGE_SUFFIXES, JSON_TEXT, RECORD, Defect, image_suffix
from atari_data.schema.questions import PLATFORMS, game_question

TARGET_TOLERANCE = 1e-4


def record_line(rec: dict) -> bytes:
    """A record as its line of ``train.jsonl`` or ``val.jsonl`` (no newline): compact orjson, the
    form validate's quick check expects (a line that writing its parsed record back reproduces holds
    no key twice, so it is not parsed again). Python's json wrote 9e-06 where orjson writes 9e-6,
    which sent every line of an 18-action game's probabilities to the second parse. Numbers must be
    finite and keys text, as :meth:`GameRules.check` requires before a record is written: orjson
    writes NaN as null. A numpy float64, which the check takes as the float it is, is written as one."""
    return orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY)


def image_name(rid: str, suffix: str = ".png", beside: str = "") -> str:
    """Path of a record's frame relative to the game folder; ``beside`` names an image that travels
    with it: ``prev`` (the previous frame) or a side image such as ``mask``."""
    return f"images/{rid}{'_' + beside if beside else ''}{suffix}"


def side_paths(rec: dict) -> dict[str, str]:
    """The side images a record's provenance references (name -> layout path), as the writer names
    them: ``images/<id>_<name>.png`` (or ``.jpg``) under the provenance key ``<name>``."""
    out = {}
    provenance = rec.get("provenance")
    for name, value in provenance.items() if isinstance(provenance, dict) else ():
        if (
            isinstance(value, str)
            and value.startswith("images/")
            and value in (image_name(rec["id"], ext, name) for ext in IMAGE_SUFFIXES)
        ):
            out[name] = value
    return out


@dataclass
class GameRules:
    """What every record of one (source, game) folder must satisfy."""

    source: str
    game: str
    actions: tuple[str, ...]
    frames: int | None = 1  # None: not known (validate, meta.json unread), a previous frame judged by name
    platform: str = "ale"
    question: dict = field(init=False)

    def __post_init__(self):
        self.actions = tuple(self.actions)
        self.question = game_question(self.game, self.actions, self.platform)["action"]
        self._actions_list = list(self.actions)
        self._id_prefix = f"{self.source}-{self.game}-e"
        # The compiled structural test, with the fields known from the folder compared outright;
        # ids and paths are compared in _semantics. Anything it rejects is explained by RECORD.check.
        self._fast = RECORD.compile(
            skip=frozenset(("id", "image", "prev_image")),
            equal={"actions": self._actions_list, "question": self.question, "source": self.source, "game": self.game},
        )

    def record(self, episode: int, step: int, label: int, target=None, provenance=None, suffix: str = ".png") -> dict:
        """Build a record in schema field order."""
        rid = self.record_id(episode, step)
        rec: dict[str, Any] = {"id": rid, "image": image_name(rid, suffix)}
        if self.frames == 2:
            rec["prev_image"] = image_name(rid, suffix, "prev")
        rec.update(game=self.game, actions=self._actions_list, label=label)
        if target is not None:
            rec["target"] = target
        rec.update(question=self.question, source=self.source, episode=episode, step=step)
        if provenance:
            rec["provenance"] = provenance
        return rec

    def record_id(self, episode: int, step: int) -> str:
        """``<source>-<Game>-e<episode:06d>-s<step:06d>``."""
        return f"{self._id_prefix}{episode:06d}-s{step:06d}"

    def check(self, rec) -> list[Defect]:
        """Every defect of one record, as (field, message) pairs; empty when it is valid."""
        out: list[Defect] = []
        # Fields that must equal a value known from the folder (options, question, names and
        # paths) are compared with it; the compiled structural test covers the rest. Only a
        # record that fails is taken apart field by field to say what is wrong.
        if type(rec) is dict and self._fast(rec):
            return self._semantics(rec, out)
        RECORD.check(rec, "", out)
        return out or self._explain(rec, self.record_id(rec["episode"], rec["step"]), out)

    def _semantics(self, rec: dict, out: list[Defect]) -> list[Defect]:
        # Only after the compiled test passed: options, question, source and game are right.
        rid = f"{self._id_prefix}{rec['episode']:06d}-s{rec['step']:06d}"  # as record_id()
        image = rec["image"]
        n = len(self.actions)
        if (
            rec["id"] == rid
            and rec["label"] < n
            and (image == f"images/{rid}.png" or image == f"images/{rid}.jpg")
            and rec.get("prev_image") == (f"{image[:-4]}_prev{image[-4:]}" if self.frames == 2 else None)
        ):
            target = rec.get("target")
            if target is not None:
                check_target(target, n, out)
            return out
        return self._explain(rec, rid, out)

    def _explain(self, rec: dict, rid: str, out: list[Defect]) -> list[Defect]:
        """The slow path of _semantics: name every field that differs from what it must be."""
        if rec["actions"] != self._actions_list:
            out.append(
                ("actions", f"{rec['actions']} differ from the game's action set (expected {self._actions_list})")
            )
        if rec["question"] != self.question:
            out.append(("question", "differs from game_question(game, actions, platform)['action']"))
        if rec["source"] != self.source:
            out.append(("source", f"{rec['source']!r} does not match the folder (expected {self.source!r})"))
        if rec["game"] != self.game:
            out.append(("game", f"{rec['game']!r} does not match the folder (expected {self.game!r})"))
        if rec["id"] != rid:
            out.append(("id", f"{rec['id']!r} does not match source, game, episode and step (expected {rid!r})"))
        image = rec["image"]
        suffix = image_suffix(image) if type(image) is str else ""
        if not suffix or image != image_name(rid, suffix):
            out.append(("image", f"{image!r} is not images/<id>.png or .jpg (expected {image_name(rid)!r})"))
            suffix = ".png"
        prev = rec.get("prev_image")
        if self.frames == 2 and prev is None:
            out.append(("prev_image", "is missing (a two-frame source needs the previous frame)"))
        elif self.frames == 1 and prev is not None:
            out.append(("prev_image", "is present in a one-frame source (meta.json frames is 1)"))
        elif prev is not None and prev != image_name(rid, suffix, "prev"):
            out.append(("prev_image", f"{prev!r} is not {image_name(rid, suffix, 'prev')!r}"))
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


def row_problem(rec: dict, has_prev: bool, questions: dict) -> tuple[str, str] | None:
    """The first defect of a packed row as a record, as (field, message), or ``None``: by the rules the
    validator applies to a layout's records, without the game's meta.json (a row carries its
    actions): the schema, then the label, target and question against the row's own actions. The
    row's frames are bytes, left out; ``has_prev`` says whether it had a previous one. JSON text
    fields may be parsed already. ``questions`` caches the questions asked, across rows. A row of
    NaN targets would train a checkpoint of NaN weights."""
    rid = rec.get("id")
    probe = {**rec, "image": image_name(str(rid))}  # the frames are bytes here; the schema names paths
    for key in JSON_TEXT & probe.keys() - {"question"}:  # the question is parsed already
        try:
            probe[key] = json.loads(probe[key]) if isinstance(probe[key], str) else probe[key]
        except (ValueError, RecursionError):
            return key, "is not JSON text"
    if has_prev:
        probe["prev_image"] = image_name(str(rid), ".png", "prev")
    found: list = []
    RECORD.check(probe, "", found)
    if found:
        return found[0]
    actions = rec["actions"]
    if rec["label"] >= len(actions):
        return "label", f"{rec['label']} is not an index into the {len(actions)} actions"
    if "target" in rec and len(rec["target"]) != len(actions):
        return "target", f"has {len(rec['target'])} entries for {len(actions)} actions"
    asked = (rec["game"], tuple(actions))
    if asked not in questions:
        questions[asked] = [game_question(rec["game"], actions, p)["action"] for p in PLATFORMS]
    if rec["question"] not in questions[asked]:
        return "question", "is not the question atari-data asks for this game and these actions"
    return None
