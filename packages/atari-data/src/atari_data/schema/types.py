"""The value types the schema's declarations are made of (:mod:`atari_data.schema` holds those).

Each type can check a value, describe itself, compile to a fast predicate, and map to JSON Schema
and to HF ``datasets`` features. Checks append (path, message) pairs and never raise.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cached_property

from laya_protocol.errors import shown

Defect = tuple[str, str]  # (field path, what is wrong)


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


def json_kind(v) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), "number" if isinstance(v, (int, float)) else type(v).__name__
    )


@dataclass(frozen=True)
class Str(Type):
    pattern: re.Pattern | None = None
    choices: tuple[str, ...] | None = None
    doc: str = "string"

    def describe(self):
        return "string" + (f" ({' / '.join(self.choices)})" if self.choices else "")

    def check(self, v, path, out):
        if type(v) is not str:
            out.append((path, f"expected a string, got {json_kind(v)}"))
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


#: The range of the schema's integers: int64, as Parquet stores them (:meth:`Int.hf`).
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


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
        # orjson reads an integer past 64 bits as a float: that too is told it is out of range
        whole = type(v) is int or (type(v) is float and v.is_integer())
        if whole and not INT64_MIN <= v <= INT64_MAX:
            out.append((path, f"{shown(v)} is past the 64-bit integer range (int64, as Parquet stores it)"))
        elif type(v) is not int:
            out.append((path, f"expected an integer, got {json_kind(v)}"))
        elif self.choices is not None and v not in self.choices:
            out.append((path, f"{v} is not one of {', '.join(map(str, self.choices))}"))
        elif self.minimum is not None and v < self.minimum:
            out.append((path, f"{v} is below the minimum {self.minimum}"))

    def expr(self, v, ns, depth=0):
        e = f"type({v}) is int"
        if self.choices is not None:
            e += f" and {v} in {_const(ns, frozenset(self.choices))}"
        else:
            e += f" and {INT64_MIN if self.minimum is None else self.minimum} <= {v} <= {INT64_MAX}"
        return f"({e})"

    def json_schema(self):
        s: dict = {
            "type": "integer",
            "minimum": INT64_MIN if self.minimum is None else self.minimum,
            "maximum": INT64_MAX,
        }
        if self.choices is not None:
            s["enum"] = list(self.choices)
        return s

    def hf(self):
        from datasets import Value

        return Value("int64")


def finite(v: int | float) -> bool:
    """Whether a JSON number is finite as a float: an integer past a float's range is not (it was an
    OverflowError traceback in stats)."""
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


@dataclass(frozen=True)
class Num(Type):
    doc: str = "number"

    def describe(self):
        return "number"

    def check(self, v, path, out):
        if type(v) not in (int, float):
            out.append((path, f"expected a number, got {json_kind(v)}"))
        elif not finite(v):
            out.append((path, f"{shown(v)} is not finite"))

    def expr(self, v, ns, depth=0):
        return f"(type({v}) in {_const(ns, (int, float))} and {_const(ns, finite)}({v}))"

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
            out.append((path, f"expected a string, got {json_kind(v)}"))

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
            out.append((path, f"expected a list, got {json_kind(v)}"))
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
            out.append((path, f"expected an object, got {json_kind(v)}"))
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
    """Any JSON value (provenance payloads: numbers, strings, lists, objects), nested at most
    ``max_depth`` levels: far past any real payload, and well inside what every reader and writer
    on the way (the standard library's ~1,000, orjson's 254 when writing) takes. Its numbers are
    finite and its integers 64-bit, as orjson reads them back."""

    doc: str = "JSON value"
    max_depth: int = 64

    def describe(self):
        return f"any JSON, nested at most {self.max_depth} levels, integers 64-bit"

    def check(self, v, path, out):
        root, todo = path, [(v, path, 0)]  # a stack, not recursion: a value nested 1,000 deep is one defect
        while todo:
            v, path, depth = todo.pop()
            if isinstance(v, float) and not math.isfinite(v):
                out.append((path, f"{v} is not finite (not valid JSON)"))
            elif type(v) is int and not INT64_MIN <= v <= INT64_MAX:  # orjson reads it back as a float, or not at all
                out.append((path, f"{shown(v)} is past the 64-bit integer range (JSON readers lose it)"))
            elif isinstance(v, (list, dict)):
                if depth == self.max_depth:
                    out.append((root, f"nests deeper than {self.max_depth} levels"))
                    return
                for k in v if isinstance(v, dict) else ():  # a record built in code, not parsed, may hold one
                    if type(k) is not str:
                        out.append((path, f"key {shown(k)} is not text (JSON object keys are strings)"))
                items = (
                    [(f"{path}[{i}]", x) for i, x in enumerate(v)]
                    if isinstance(v, list)
                    else [(f"{path}.{k}", x) for k, x in v.items()]
                )
                todo.extend((x, p, depth + 1) for p, x in reversed(items))  # reversed: checked in order
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
    version: int | None = None  # named in the message for an unknown field

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def describe(self):
        return "object (" + ", ".join(self.names) + ")"

    def check(self, v, path, out, skip: frozenset = frozenset()):
        """Check every field but those in ``skip`` (already known to be right)."""
        if type(v) is not dict:
            out.append((path or "(record)", f"expected an object, got {json_kind(v)}"))
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
                out.append((prefix + str(k), f"unknown field (schema v{self.version} allows: {', '.join(self.names)})"))

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
