"""Property-based corruption: whatever is done to a valid record or meta.json, the validator
reports it as a defect of the package's error type, and the CLI exits 2 without a traceback."""

import json
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atari_data import schema
from atari_data.cli import main
from atari_data.errors import AtariDataError
from atari_data.layout.validate import validate

GAME = "expert2f/Breakout"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**12), 10**12) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)


def wrong_type_for(field_type):
    """JSON values that can never satisfy ``field_type``."""

    def bad(v):
        out = []
        field_type.check(v, "x", out)
        return bool(out)

    return json_values.filter(bad)


REQUIRED_RECORD = [f for f in schema.RECORD.fields if f.required]
REQUIRED_META = [f for f in schema.META.fields if f.required]


@st.composite
def record_corruption(draw):
    kind = draw(st.sampled_from(["delete", "retype", "unknown", "label", "raw"]))
    if kind == "delete":
        f = draw(st.sampled_from(REQUIRED_RECORD))
        return kind, f.name, None
    if kind == "retype":
        f = draw(st.sampled_from(schema.RECORD.fields))
        return kind, f.name, draw(wrong_type_for(f.type))
    if kind == "unknown":
        key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in schema.RECORD.names))
        return kind, key, draw(json_values)
    if kind == "label":
        return kind, "label", draw(st.integers(4, 10**6) | st.integers(-(10**6), -1))
    # Any line that is not exactly a valid record: random text or random JSON.
    text = draw(st.text(max_size=40).filter(lambda t: "\n" not in t and "\r" not in t) | json_values.map(json.dumps))
    return kind, None, text


@st.composite
def meta_corruption(draw):
    kind = draw(st.sampled_from(["delete", "retype", "unknown"]))
    if kind == "delete":
        return kind, draw(st.sampled_from(REQUIRED_META)).name, None
    if kind == "retype":
        f = draw(st.sampled_from(schema.META.fields))
        return kind, f.name, draw(wrong_type_for(f.type))
    key = draw(st.text(min_size=1, max_size=10).filter(lambda k: k not in schema.META.names))
    return kind, key, draw(json_values)


@pytest.fixture(scope="module")
def work(layout_master, tmp_path_factory):
    root = tmp_path_factory.mktemp("prop") / "root"
    shutil.copytree(layout_master, root)
    return root


def _check(root, capsys):
    report = validate(root)
    assert report.defects, "the corruption went unreported"
    assert all(isinstance(d, AtariDataError) for d in report.defects)
    rc = main(["validate", str(root)])
    out = capsys.readouterr()
    assert rc == 2 and "Traceback" not in out.out + out.err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corruption=record_corruption(), line=st.integers(0, 200))
def test_any_record_corruption_is_reported(work, capsys, corruption, line):
    path = work / GAME / "train.jsonl"
    original = path.read_bytes()
    lines = original.decode().splitlines()
    i = line % len(lines)
    kind, key, value = corruption
    rec = json.loads(lines[i])
    if kind == "delete":
        del rec[key]
    elif kind in ("retype", "unknown", "label"):
        rec[key] = value
    lines[i] = value if kind == "raw" else json.dumps(rec)
    try:
        path.write_text("\n".join(lines) + "\n")
        _check(work, capsys)
    finally:
        path.write_bytes(original)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corruption=meta_corruption())
def test_any_meta_corruption_is_reported(work, capsys, corruption):
    path = work / GAME / "meta.json"
    original = path.read_bytes()
    meta = json.loads(original)
    kind, key, value = corruption
    if kind == "delete":
        del meta[key]
    else:
        meta[key] = value
    try:
        path.write_text(json.dumps(meta))
        _check(work, capsys)
    finally:
        path.write_bytes(original)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_in_a_split_file_are_reported(work, capsys, data):
    path = work / GAME / "val.jsonl"
    original = path.read_bytes()
    try:
        path.write_bytes(data)
        _check(work, capsys)  # empty or garbage: wrong counts at least, never a crash
    finally:
        path.write_bytes(original)
