"""The schema's one home against every view derived from it."""

import json
import re
from importlib import resources
from pathlib import Path

import jsonschema
import pytest

from atari_data import schema
from atari_data.layout import list_games

README = Path(__file__).parents[2] / "docs" / "formats.md"


@pytest.mark.parametrize("kind", ["record", "meta"])
def test_shipped_json_schema_is_the_derived_one(kind):
    shipped = json.loads(resources.files("atari_data").joinpath(f"schemas/{kind}.schema.json").read_text())
    assert shipped == schema.json_schema(kind), "run tools/update_schema_docs.py"


@pytest.mark.parametrize("kind,obj", [("record", schema.RECORD), ("meta", schema.META)])
def test_readme_table_is_the_derived_one(kind, obj):
    text = README.read_text()
    m = re.search(rf"<!-- schema:{kind} -->\n(.*?)\n<!-- /schema:{kind} -->", text, re.S)
    assert m, f"README lacks the schema:{kind} markers"
    assert m[1].strip() == schema.markdown_table(obj)


def test_hf_features_have_every_field_in_order():
    from datasets import Image, List, Value

    feats = schema.hf_features(frames=2)
    assert list(feats) == list(schema.RECORD.names)
    assert isinstance(feats["image"], Image) and isinstance(feats["prev_image"], Image)
    assert feats["actions"] == List(Value("string"))
    assert feats["question"] == Value("string")  # free-keyed criteria travel as JSON text
    assert "prev_image" not in schema.hf_features(frames=1)


def test_written_records_and_meta_satisfy_the_json_schema(layout_master):
    rec_schema, meta_schema = schema.json_schema("record"), schema.json_schema("meta")
    for g in list_games(layout_master):
        jsonschema.validate(g.meta(), meta_schema)
        for split in ("train", "val"):
            for rec in g.records(split):
                jsonschema.validate(rec, rec_schema)


@pytest.mark.parametrize(
    "change",
    [
        {"extra_field": 1},
        {"label": -1},
        {"label": "3"},
        {"id": "bad id"},
        {"image": "../x.png"},
        {"actions": []},
        {"question": {"type": "choice"}},
        {"provenance": []},
    ],
)
def test_json_schema_and_structural_check_agree_on_bad_records(layout_master, change):
    g = list_games(layout_master)[0]
    rec = next(g.records("train"))
    rec.update(change)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(rec, schema.json_schema("record"))
    # The fast checker reports it too, as a defect, never an exception.
    from atari_data.layout.records import GameRules

    rules = GameRules(g.source, g.game, rec["actions"] if change.get("actions") is None else ("NOOP",), 2)
    assert rules.check(rec)


def test_unknown_fields_are_rejected_with_the_allowed_list():
    out = schema.check_structure({"bogus": 1})
    fields = [f for f, _ in out]
    assert "bogus" in fields
    assert any("allows" in msg for f, msg in out if f == "bogus")
    assert {"id", "image", "game", "actions", "label", "question", "source", "episode", "step"} <= set(fields)
