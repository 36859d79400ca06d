"""The frozen record and meta.json schema: the one home of every field.

Each field is declared once below, with its type and meaning. Everything else is derived from
these declarations: the structural checks the validator and writer run, the HF ``datasets``
features, the JSON Schema shipped with every dataset, and the table in the package README.

Frozen means versioned: a record or meta.json with a field not declared here is rejected, and
any change to the declarations needs a new ``SCHEMA_VERSION`` and a migration of older data.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import cached_property

from laya_protocol.games import ACTION_SETS
from laya_protocol.names import BASELINE_ROLES, score_key, scores_key
from laya_protocol.protocol import AUTO_FIRE_RULE, BASELINE_CAP

SCHEMA_VERSION = 1
KNOWN_VERSIONS = (1,)

SOURCE_RE = re.compile(r"[a-z][a-z0-9_]*\Z")
GAME_RE = re.compile(r"[A-Za-z0-9]+\Z")
ID_RE = re.compile(r"([a-z][a-z0-9_]*)-([A-Za-z0-9]+)-e(\d{6})-s(\d{6})\Z")
FRAME_FORMAT_RE = re.compile(r"(rgb|gray)_(\d+)x(\d+)\Z")
IMAGE_SUFFIXES = (".png", ".jpg")

Defect = tuple[str, str]  # (field path, what is wrong)


# -- types ---------------------------------------------------------------------------------------
# A handful of value types, each able to check a value, describe itself and map to JSON Schema and
# to HF datasets features. Checks append (path, message) pairs and never raise.

class Type:
    doc: str = ""

    def check(self, v, path: str, out: list[Defect]) -> None:
        raise NotImplementedError

    def expr(self, v: str, ns: dict, depth: int = 0) -> str:
        """A Python expression, true exactly when the value named ``v`` passes :meth:`check`.

        Compiled once into a fast yes/no test for the common case (valid data); :meth:`check`
        explains the rare failures.
        """
        raise NotImplementedError

    def json_schema(self) -> dict:
        raise NotImplementedError

    def hf(self):
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError


def _const(ns: dict, value) -> str:
    """Name a constant for a compiled expression."""
    name = f"_c{len(ns)}"
    ns[name] = value
    return name


def _kind(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__)


@dataclass(frozen=True)
class Str(Type):
    pattern: re.Pattern | None = None
    choices: tuple[str, ...] | None = None
    doc: str = "string"

    def describe(self):
        return "string" + (f" ({' / '.join(self.choices)})" if self.choices else "")

    def check(self, v, path, out):
        if type(v) is not str:
            out.append((path, f"expected a string, got {_kind(v)}"))
        elif self.choices is not None and v not in self.choices:
            out.append((path, f"{v!r} is not one of {', '.join(self.choices)}"))
        elif self.pattern is not None and not self.pattern.match(v):
            out.append((path, f"{v!r} does not match {self.pattern.pattern.rstrip('Z').rstrip(chr(92))}"))

    def expr(self, v, ns, depth=0):
        e = f"type({v}) is str"
        if self.choices is not None:
            e += f" and {v} in {_const(ns, frozenset(self.choices))}"
        elif self.pattern is not None:
            e += f" and {_const(ns, self.pattern)}.match({v}) is not None"
        return f"({e})"

    def json_schema(self):
        s: dict = {"type": "string"}
        if self.choices is not None:
            s["enum"] = list(self.choices)
        if self.pattern is not None:
            s["pattern"] = "^" + self.pattern.pattern.replace("\\Z", "$")
        return s

    def hf(self):
        from datasets import Value
        return Value("string")


@dataclass(frozen=True)
class Int(Type):
    minimum: int | None = 0
    choices: tuple[int, ...] | None = None
    doc: str = "integer"

    def describe(self):
        if self.choices:
            return "integer (" + " / ".join(map(str, self.choices)) + ")"
        return "integer" + (f" >= {self.minimum}" if self.minimum is not None else "")

    def check(self, v, path, out):
        if type(v) is not int:
            out.append((path, f"expected an integer, got {_kind(v)}"))
        elif self.choices is not None and v not in self.choices:
            out.append((path, f"{v} is not one of {', '.join(map(str, self.choices))}"))
        elif self.minimum is not None and v < self.minimum:
            out.append((path, f"{v} is below the minimum {self.minimum}"))

    def expr(self, v, ns, depth=0):
        e = f"type({v}) is int"
        if self.choices is not None:
            e += f" and {v} in {_const(ns, frozenset(self.choices))}"
        elif self.minimum is not None:
            e += f" and {v} >= {self.minimum}"
        return f"({e})"

    def json_schema(self):
        s: dict = {"type": "integer"}
        if self.minimum is not None:
            s["minimum"] = self.minimum
        if self.choices is not None:
            s["enum"] = list(self.choices)
        return s

    def hf(self):
        from datasets import Value
        return Value("int64")


@dataclass(frozen=True)
class Num(Type):
    doc: str = "number"

    def describe(self):
        return "number"

    def check(self, v, path, out):
        if type(v) not in (int, float):
            out.append((path, f"expected a number, got {_kind(v)}"))
        elif not math.isfinite(v):
            out.append((path, f"{v} is not finite"))

    def expr(self, v, ns, depth=0):
        return f"(type({v}) in {_const(ns, (int, float))} and {_const(ns, math.isfinite)}({v}))"

    def json_schema(self):
        return {"type": "number"}

    def hf(self):
        from datasets import Value
        return Value("float64")


@dataclass(frozen=True)
class Image(Type):
    """A frame file, as a path relative to the game folder (``images/<id>.png``)."""
    doc: str = "image path"

    def describe(self):
        return "image path"

    def check(self, v, path, out):
        if type(v) is not str:
            out.append((path, f"expected a string, got {_kind(v)}"))

    def expr(self, v, ns, depth=0):
        return f"(type({v}) is str)"

    def json_schema(self):
        return {"type": "string", "pattern": r"^images/[^/]+\.(png|jpg)$"}

    def hf(self):
        from datasets import Image as HFImage
        return HFImage()


@dataclass(frozen=True)
class List(Type):
    item: Type
    min_items: int = 0
    unique: bool = False
    doc: str = "list"

    def describe(self):
        return f"list of {self.item.describe()}"

    def check(self, v, path, out):
        if type(v) is not list:
            out.append((path, f"expected a list, got {_kind(v)}"))
            return
        if len(v) < self.min_items:
            out.append((path, f"has {len(v)} items, expected at least {self.min_items}"))
        for i, x in enumerate(v):
            self.item.check(x, f"{path}[{i}]", out)
        if self.unique and len(set(map(repr, v))) != len(v):
            out.append((path, "has repeated items"))

    def expr(self, v, ns, depth=0):
        x = f"_x{depth}"
        e = f"type({v}) is list and all({self.item.expr(x, ns, depth + 1)} for {x} in {v})"
        if self.min_items:
            e += f" and len({v}) >= {self.min_items}"
        if self.unique:
            e += f" and len(set(map(repr, {v}))) == len({v})"
        return f"({e})"

    def json_schema(self):
        s = {"type": "array", "items": self.item.json_schema()}
        if self.min_items:
            s["minItems"] = self.min_items
        if self.unique:
            s["uniqueItems"] = True
        return s

    def hf(self):
        from datasets import List as HFList
        return HFList(self.item.hf())


@dataclass(frozen=True)
class Map(Type):
    """A mapping from string keys to values of one type."""
    value: Type
    doc: str = "mapping"

    def describe(self):
        return f"mapping to {self.value.describe()}"

    def check(self, v, path, out):
        if type(v) is not dict:
            out.append((path, f"expected an object, got {_kind(v)}"))
            return
        for k, x in v.items():
            self.value.check(x, f"{path}.{k}", out)

    def expr(self, v, ns, depth=0):
        x = f"_x{depth}"
        return f"(type({v}) is dict and all({self.value.expr(x, ns, depth + 1)} for {x} in {v}.values()))"

    def json_schema(self):
        return {"type": "object", "additionalProperties": self.value.json_schema()}

    def hf(self):
        # Arrow needs fixed struct keys; a free-keyed mapping travels as canonical JSON text.
        from datasets import Value
        return Value("string")


@dataclass(frozen=True)
class JSONValue(Type):
    """Any JSON value (provenance payloads: numbers, strings, lists, objects)."""
    doc: str = "JSON value"

    def describe(self):
        return "any JSON"

    def check(self, v, path, out):
        if isinstance(v, float) and not math.isfinite(v):
            out.append((path, f"{v} is not finite (not valid JSON)"))
        elif isinstance(v, list):
            for i, x in enumerate(v):
                self.check(x, f"{path}[{i}]", out)
        elif isinstance(v, dict):
            for k, x in v.items():
                self.check(x, f"{path}.{k}", out)
        elif not isinstance(v, (str, int, float, bool, type(None))):
            out.append((path, f"expected a JSON value, got {type(v).__name__}"))

    def expr(self, v, ns, depth=0):
        def ok(value, check=self.check):
            out: list = []
            check(value, "", out)
            return not out
        return f"{_const(ns, ok)}({v})"

    def json_schema(self):
        return {}

    def hf(self):
        from datasets import Value
        return Value("string")


@dataclass(frozen=True)
class Nullable(Type):
    inner: Type
    doc: str = ""

    def describe(self):
        return f"{self.inner.describe()} or null"

    def check(self, v, path, out):
        if v is not None:
            self.inner.check(v, path, out)

    def expr(self, v, ns, depth=0):
        return f"({v} is None or {self.inner.expr(v, ns, depth)})"

    def json_schema(self):
        return {"anyOf": [self.inner.json_schema(), {"type": "null"}]}

    def hf(self):
        return self.inner.hf()


@dataclass(frozen=True)
class Field:
    name: str
    type: Type
    required: bool
    doc: str


@dataclass(frozen=True)
class Object(Type):
    fields: tuple[Field, ...]
    doc: str = "object"

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def describe(self):
        return "object (" + ", ".join(self.names) + ")"

    def check(self, v, path, out, skip: frozenset = frozenset()):
        """Check every field but those in ``skip`` (already known to be right)."""
        if type(v) is not dict:
            out.append((path or "(record)", f"expected an object, got {_kind(v)}"))
            return
        prefix = f"{path}." if path else ""
        for f in self.fields:
            if f.name in skip:
                continue
            if f.name in v:
                f.type.check(v[f.name], prefix + f.name, out)
            elif f.required:
                out.append((prefix + f.name, "is missing"))
        known = self.known
        for k in v:
            if k not in known:
                out.append((prefix + str(k), f"unknown field (schema v{SCHEMA_VERSION} allows: "
                                             f"{', '.join(self.names)})"))

    @cached_property
    def known(self) -> frozenset:
        return frozenset(self.names)

    def expr(self, v, ns, depth=0, skip: frozenset = frozenset(), equal: dict | None = None):
        parts = [f"type({v}) is dict", f"{v}.keys() <= {_const(ns, self.known)}"]
        for name, value in (equal or {}).items():  # fields that must equal a known value
            parts.append(f"{v}.get({name!r}) == {_const(ns, value)}")
        required = frozenset(f.name for f in self.fields if f.required)
        if required:
            parts.append(f"{_const(ns, required)} <= {v}.keys()")
        for f in self.fields:
            if f.name in skip:
                continue
            item = f.type.expr(f"{v}[{f.name!r}]", ns, depth)
            parts.append(item if f.required else f"({f.name!r} not in {v} or {item})")
        return "(" + " and ".join(parts) + ")"

    def compile(self, skip: frozenset = frozenset(), equal: dict | None = None):
        """A fast predicate: does a value pass :meth:`check`, ignoring the fields in ``skip``, with
        the fields in ``equal`` equal to the given values?"""
        ns: dict = {}
        skip = skip | frozenset(equal or ())
        return eval(f"lambda _v: {self.expr('_v', ns, 0, skip, equal)}", ns)  # noqa: S307 - our own schema

    def json_schema(self):
        return {
            "type": "object",
            "properties": {f.name: {**f.type.json_schema(), "description": f.doc} for f in self.fields},
            "required": [f.name for f in self.fields if f.required],
            "additionalProperties": False,
        }

    def hf(self):
        # Nested objects travel as canonical JSON text too: one json.loads gives the record's value.
        from datasets import Value
        return Value("string")


# -- the record ------------------------------------------------------------------------------------

QUESTION = Object((
    Field("type", Str(choices=("choice",)), True, "question type; always `choice`"),
    Field("instructions", Str(), True, "the text the model reads before the options"),
    Field("criteria", Map(Str()), True, "option key -> label, keys exactly `actions` in order"),
))

RECORD = Object((
    Field("id", Str(pattern=ID_RE), True, "`<source>-<Game>-e<episode:06d>-s<step:06d>`, unique"),
    Field("image", Image(), True, "the frame the action was taken on: `images/<id>.png` (or `.jpg`)"),
    Field("prev_image", Image(), False,
          "two-frame sources only: the previous decision's frame, `images/<id>_prev.png`; a copy of "
          "`image` on an episode's first step and after an auto-FIRE"),
    Field("game", Str(pattern=GAME_RE), True, "game name; for ALE the v5 name (`Breakout`, `MsPacman`)"),
    Field("actions", List(Str(), min_items=1, unique=True), True,
          "the options: for ALE the game's minimal action set in v5 order"),
    Field("label", Int(), True, "index into `actions` of the chosen action"),
    Field("target", List(Num()), False,
          "probability over `actions` (an expert's policy); absent for human or one-hot data"),
    Field("question", QUESTION, True, "exactly `atari_question(game, actions)[\"action\"]`"),
    Field("source", Str(pattern=SOURCE_RE), True, "the dataset source (`expert`, `expert2f`, `jat`, ...)"),
    Field("episode", Int(), True, "episode number, unique per (source, game); val and train disjoint"),
    Field("step", Int(), True, "decision index within the episode, from 0"),
    Field("provenance", Map(JSONValue()), False,
          "source-specific facts: the move actually played, gaze, mask path, score, ..."),
))

# -- meta.json -----------------------------------------------------------------------------------

_SPLIT = Object((
    Field("records", Int(), True, "records written"),
    Field("episodes", Int(), True, "distinct episodes among the records"),
    Field("labels", Map(Int()), True, "records per action name"),
))

PROTOCOL = Object((
    Field("env_id", Str(), True, "e.g. `ALE/Breakout-v5`"),
    Field("repeat_action_probability", Num(), True, "sticky-action probability"),
    Field("frameskip", Int(minimum=1), True, "emulator frames per decision"),
    Field("action_set", Str(choices=ACTION_SETS), True, "which ALE action set"),
    Field("max_frames_per_episode", Int(), True, "emulator frame cap"),
    Field("decision_cap", Nullable(Int()), True, "decision cap, or null for none"),
    Field("auto_fire", Str(choices=(AUTO_FIRE_RULE, "none")), True,
          "when FIRE is pressed automatically (not a decision)"),
))

_BASELINE_FIELDS = []
for _who in BASELINE_ROLES:
    for _cap in (None, BASELINE_CAP):
        _BASELINE_FIELDS += [
            Field(score_key(_who, _cap), Num(), False,
                  f"{_who} mean episode score" + (f", first {_cap} decisions" if _cap else "")),
            Field(scores_key(_who, _cap), List(Num()), False,
                  f"{_who} per-episode scores" + (f", first {_cap} decisions" if _cap else "")),
        ]
BASELINES = Object((
    Field("expert", Str(), False, "which expert policy was measured"),
    *_BASELINE_FIELDS,
    Field("protocol", PROTOCOL, False, "how the baselines were played"),
))

META = Object((
    Field("schema_version", Int(choices=KNOWN_VERSIONS), True, "record schema version"),
    Field("source", Str(pattern=SOURCE_RE), True, "equals the source folder"),
    Field("game", Str(pattern=GAME_RE), True, "equals the game folder"),
    Field("platform", Str(pattern=SOURCE_RE), True, "`ale` for Atari; ALE rules apply only there"),
    Field("frame_format", Str(pattern=FRAME_FORMAT_RE), True,
          "`rgb_<height>x<width>` or `gray_<height>x<width>` of every frame, as the source gave it"),
    Field("frames", Int(choices=(1, 2)), True, "2 when records carry `prev_image`"),
    Field("actions", List(Str(), min_items=1, unique=True), True, "the options of every record"),
    Field("caps", Object((Field("train", Int(), True, "train cap"), Field("val", Int(), True, "val cap"))),
          True, "the record caps the writer applied"),
    Field("train", _SPLIT, True, "what train.jsonl holds"),
    Field("val", _SPLIT, True, "what val.jsonl holds"),
    Field("dropped", Map(Int()), True, "frames not written, by reason"),
    Field("origin", Str(), True, "dataset id, URL or agent that produced the data"),
    Field("license", Str(), True, "license of the frames and labels"),
    Field("protocol", Nullable(PROTOCOL), False, "how the episodes were played, when known"),
    Field("baselines", BASELINES, False, "expert and random scores for evaluation"),
    Field("seed", Int(), False, "the seed the generator or importer ran with"),
))


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


def encode_json(value) -> str:
    """Canonical JSON text, as stored for free-keyed mappings in shards and HF rows."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=False)

