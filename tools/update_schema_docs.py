"""Regenerate every view of the frozen schema that is committed: the shipped JSON Schemas and the
tables in docs/formats.md. Run after changing atari_data.schema:

    uv run python tools/update_schema_docs.py
"""

import json
import re
from pathlib import Path

from atari_data import schema

PKG = Path(__file__).resolve().parents[1] / "packages" / "atari-data"

readme = PKG.parents[1] / "docs" / "formats.md"
text = readme.read_text()
for kind, obj in (("record", schema.RECORD), ("meta", schema.META)):
    (PKG / "src" / "atari_data" / "schemas" / f"{kind}.schema.json").write_text(
        json.dumps(schema.json_schema(kind), indent=2) + "\n"
    )
    table = schema.markdown_table(obj)
    text = re.sub(
        rf"(<!-- schema:{kind} -->\n).*?(\n<!-- /schema:{kind} -->)",
        lambda m, t=table: m[1] + t + m[2],
        text,
        flags=re.S,
    )
readme.write_text(text)
print(f"updated {readme} and the JSON Schemas")
