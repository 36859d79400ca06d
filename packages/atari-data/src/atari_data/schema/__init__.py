"""The frozen record and meta.json schema: the one home of every field.

Each field is declared once below, with its type and meaning (the types themselves are in
:mod:`atari_data.schema.types`). Everything else is derived from these declarations: the
structural checks the validator and writer run, the HF ``datasets`` features, the JSON Schema
shipped with every dataset, and the tables in docs/formats.md (``tools/update_schema_docs.py``).

Frozen means versioned: a record or meta.json with a field not declared here is rejected, and
any change to the declarations needs a new ``SCHEMA_VERSION`` and a migration of older data.
"""

from __future__ import annotations

import json
import re

from atari_data.schema.types import Defect, Field, Image, Int, JSONValue, List, Map, Nullable, Num, Object, Str
from laya_protocol.games import ACTION_SETS
from laya_protocol.names import BASELINE_ROLES, score_key, scores_key
from laya_protocol.protocol import AUTO_FIRE_RULES, BASELINE_CAP

SCHEMA_VERSION = 1
KNOWN_VERSIONS = (1,)

SOURCE_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
GAME_RE = re.compile(r"[A-Za-z0-9]+\Z")
ID_RE = re.compile(r"([a-z][a-z0-9_]*)-([A-Za-z0-9]+)-e([0-9]{6,})-s([0-9]{6,})\Z")  # as :06d writes them
FRAME_FORMAT_RE = re.compile(r"(rgb|gray)_(\d+)x(\d+)\Z")
ALE_FRAME_FORMAT = "rgb_210x160"  # an ALE screen as the emulator draws it, height first
#: Frame file suffixes and the one image format each holds (Pillow's name): a frame is decoded only
#: as the format its name says, so a TIFF or BMP named .png is refused rather than decoded.
IMAGE_FORMATS = {".png": "PNG", ".jpg": "JPEG"}
IMAGE_SUFFIXES = tuple(IMAGE_FORMATS)


def image_suffix(name: str) -> str:
    """The frame suffix (``.png``, ``.jpg``) a file name or a tar member's extension (``png``,
    ``prev.png``) ends in: what follows its last dot, or all of it; "" when that is no frame's."""
    suffix = "." + name.rpartition(".")[2]
    return suffix if suffix in IMAGE_FORMATS else ""


def target_of(rec) -> list[float]:
    """A record's distribution over its ``actions``: its ``target``, else all of it on its ``label``
    (human or one-hot data). What every learner trains towards."""
    if rec.get("target") is not None:
        return list(rec["target"])
    out = [0.0] * len(rec["actions"])
    out[rec["label"]] = 1.0
    return out


def frame_want(meta, file: str) -> tuple[str, tuple[int, int]]:
    """(mode, (width, height)) that a game's meta (from its ``file``) says every frame is; one without
    a usable frame_format is an AtariDataError, as its frames could be any size."""
    from atari_data.errors import AtariDataError

    want = frame_size(meta.get("frame_format")) if isinstance(meta, dict) else None
    if want is None:
        raise AtariDataError(
            "is missing or not rgb_<height>x<width> / gray_<height>x<width>, which every frame must match",
            file=file,
            field="frame_format",
        )
    return want


def frame_size(fmt) -> tuple[str, tuple[int, int]] | None:
    """(Pillow's mode, (width, height)) that a meta.json ``frame_format`` names, or None."""
    m = FRAME_FORMAT_RE.match(fmt) if isinstance(fmt, str) else None
    return ("RGB" if m[1] == "rgb" else "L", (int(m[3]), int(m[2]))) if m else None


def _object(fields: tuple[Field, ...]) -> Object:
    return Object(fields, version=SCHEMA_VERSION)


# -- the record ------------------------------------------------------------------------------------

QUESTION = _object(
    (
        Field("type", Str(choices=("choice",)), True, "question type; always `choice`"),
        Field("instructions", Str(), True, "the text the model reads before the options"),
        Field("criteria", Map(Str()), True, "option key -> label, keys exactly `actions` in order"),
    )
)

RECORD = _object(
    (
        Field("id", Str(pattern=ID_RE), True, "`<source>-<Game>-e<episode:06d>-s<step:06d>`, unique"),
        Field("image", Image(), True, "the frame the action was taken on: `images/<id>.png` (or `.jpg`)"),
        Field(
            "prev_image",
            Image(),
            False,
            "two-frame sources only: the previous decision's frame, `images/<id>_prev.png`; a copy of "
            "`image` on an episode's first step and after an auto-FIRE",
        ),
        Field("game", Str(pattern=GAME_RE), True, "game name; for ALE the v5 name (`Breakout`, `MsPacman`)"),
        Field(
            "actions",
            List(Str(), min_items=1, unique=True),
            True,
            "the options: for ALE the game's minimal action set in v5 order",
        ),
        Field("label", Int(), True, "index into `actions` of the chosen action"),
        Field(
            "target",
            List(Num()),
            False,
            "probability over `actions` (an expert's policy); absent for human or one-hot data",
        ),
        Field("question", QUESTION, True, 'exactly `game_question(game, actions, platform)["action"]`'),
        Field("source", Str(pattern=SOURCE_RE), True, "the dataset source (`expert`, `expert2f`, `jat`, ...)"),
        Field("episode", Int(), True, "episode number, unique per (source, game); val and train disjoint"),
        Field("step", Int(), True, "decision index within the episode, from 0"),
        Field(
            "provenance",
            Map(JSONValue()),
            False,
            "source-specific facts: the move actually played, gaze, mask path, score, ...",
        ),
    )
)

#: Record fields whose keys vary from game to game (mappings): Parquet rows and WebDataset records
#: carry them as canonical JSON text, so a reader inferring types from the first rows keeps every key.
JSON_TEXT = frozenset(f.name for f in RECORD.fields if isinstance(f.type, (Object, Map, JSONValue)))
FRAME_FIELDS = frozenset(f.name for f in RECORD.fields if isinstance(f.type, Image))

# -- meta.json -----------------------------------------------------------------------------------

_SPLIT = _object(
    (
        Field("records", Int(), True, "records written"),
        Field("episodes", Int(), True, "distinct episodes among the records"),
        Field("labels", Map(Int()), True, "records per action name"),
    )
)

PROTOCOL = _object(
    (
        Field("env_id", Str(), True, "e.g. `ALE/Breakout-v5`"),
        Field("repeat_action_probability", Num(), True, "sticky-action probability"),
        Field("frameskip", Int(minimum=1), True, "emulator frames per decision"),
        Field("action_set", Str(choices=ACTION_SETS), True, "which ALE action set"),
        Field("max_frames_per_episode", Int(), True, "emulator frame cap"),
        Field("decision_cap", Nullable(Int()), True, "decision cap, or null for none"),
        Field(
            "auto_fire",
            Str(choices=AUTO_FIRE_RULES),
            True,
            "when FIRE is pressed automatically (not a decision)",
        ),
    )
)

EMULATOR = _object(
    (
        Field("ale_py", Str(), True, "the ale-py version"),
        Field("rom_md5", Str(pattern=re.compile(r"[0-9a-f]{32}\Z")), True, "MD5 of the game's ROM file"),
    )
)

_BASELINE_FIELDS = []
for _who in BASELINE_ROLES:
    for _cap in (None, BASELINE_CAP):
        _BASELINE_FIELDS += [
            Field(
                score_key(_who, _cap),
                Num(),
                False,
                f"{_who} mean episode score" + (f", first {_cap} decisions" if _cap else ""),
            ),
            Field(
                scores_key(_who, _cap),
                List(Num()),
                False,
                f"{_who} per-episode scores" + (f", first {_cap} decisions" if _cap else ""),
            ),
        ]
BASELINES = _object(
    (
        Field("expert", Str(), False, "which expert policy was measured"),
        *_BASELINE_FIELDS,
        Field("protocol", PROTOCOL, False, "how the baselines were played"),
    )
)

META = _object(
    (
        Field("schema_version", Int(choices=KNOWN_VERSIONS), True, "record schema version"),
        Field("source", Str(pattern=SOURCE_RE), True, "equals the source folder"),
        Field("game", Str(pattern=GAME_RE), True, "equals the game folder"),
        Field("platform", Str(pattern=SOURCE_RE), True, "`ale` for Atari; ALE rules apply only there"),
        Field(
            "frame_format",
            Str(pattern=FRAME_FORMAT_RE),
            True,
            "`rgb_<height>x<width>` or `gray_<height>x<width>` of every frame, as the source gave it",
        ),
        Field("frames", Int(choices=(1, 2)), True, "2 when records carry `prev_image`"),
        Field("actions", List(Str(), min_items=1, unique=True), True, "the options of every record"),
        Field(
            "caps",
            _object((Field("train", Int(), True, "train cap"), Field("val", Int(), True, "val cap"))),
            True,
            "the record caps the writer applied",
        ),
        Field("train", _SPLIT, True, "what train.jsonl holds"),
        Field("val", _SPLIT, True, "what val.jsonl holds"),
        Field("dropped", Map(Int()), True, "frames not written, by reason"),
        Field("origin", Str(), True, "dataset id, URL or agent that produced the data"),
        Field("license", Str(), True, "license of the frames and labels"),
        Field("protocol", Nullable(PROTOCOL), False, "how the episodes were played, when known"),
        Field("emulator", EMULATOR, False, "the emulator the episodes were played in, when played here"),
        Field("baselines", BASELINES, False, "expert and random scores for evaluation"),
        Field("seed", Int(), False, "the seed the generator or importer ran with"),
    )
)


# -- derived views --------------------------------------------------------------------------------


def json_schema(kind: str = "record") -> dict:
    """The JSON Schema (draft 2020-12) of a record or of meta.json."""
    obj = {"record": RECORD, "meta": META}[kind]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"atari-data {kind} (schema v{SCHEMA_VERSION})",
        **obj.json_schema(),
    }


def hf_features(frames: int = 2):
    """HF ``datasets`` features of a record row: images as ``Image``, free mappings as JSON text."""
    from datasets import Features

    feats = {f.name: f.type.hf() for f in RECORD.fields}
    if frames == 1:
        feats.pop("prev_image")
    return Features(feats)


def markdown_table(obj: Object = RECORD) -> str:
    """The docs table of a schema object; for records, with the HF ``datasets`` feature of each field."""
    hf = obj is RECORD
    head = "| field | type | required |" + (" HF feature |" if hf else "") + " meaning |"
    rows = [head, "|" + " --- |" * head.count(" |")]
    for f in obj.fields:
        feature = f" {_feature_name(f.type.hf())} |" if hf else ""
        rows.append(f"| `{f.name}` | {f.type.describe()} | {'yes' if f.required else 'no'} |{feature} {f.doc} |")
    return "\n".join(rows)


def _feature_name(feature) -> str:
    from datasets import Image as HFImage
    from datasets import List as HFList
    from datasets import Value

    if isinstance(feature, HFImage):
        return "`Image`"
    if isinstance(feature, HFList):
        return f"list of `{feature.feature.dtype}`"
    if isinstance(feature, Value):
        return f"`{feature.dtype}`"
    return type(feature).__name__


def check_structure(value, obj: Object = RECORD) -> list[Defect]:
    """Structural defects of a record (or meta.json with ``obj=META``): types, missing, unknown."""
    out: list[Defect] = []
    obj.check(value, "", out)
    return out


# one encoder for every call: json.dumps with options builds a new one each time (pack encodes
# several texts a record)
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=False)


def encode_json(value) -> str:
    """Canonical JSON text, as stored for free-keyed mappings in shards and HF rows."""
    return _COMPACT.encode(value)
