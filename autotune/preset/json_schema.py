"""The preset's JSON Schema, shipped in the package so that an editor checks a preset as
it is typed: ``preset.schema.json`` beside this module, generated from the preset's records.

Every preset autotune writes starts with a ``# yaml-language-server: $schema=...`` line
naming the installed file (YAML ignores it). After a change to the records, regenerate the
file with ``python -c "import autotune.preset.json_schema as s; s.write_schema_file()"``;
a test fails while it is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "REQUIRED_IN_A_FILE",
    "SCHEMA_FILE",
    "preset_json_schema",
    "schema_comment",
    "schema_text",
    "write_schema_file",
]

SCHEMA_FILE = Path(__file__).with_name("preset.schema.json")

# Fields a preset file must hold although the record has a default for them (a preset
# made in code gets its version and its time; a file without them is not a preset). The
# reader (``preset_from_dict``) and the schema both require them.
REQUIRED_IN_A_FILE = ("schema_version", "created")


def preset_json_schema() -> dict[str, Any]:
    """The JSON Schema of a preset file, from the records that validate one."""
    from autotune.core.jsonschema import json_schema
    from autotune.preset.schema import Preset

    return json_schema(Preset, title="autotune preset", required=REQUIRED_IN_A_FILE)


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(preset_json_schema(), indent=2, sort_keys=False) + "\n"


def schema_comment() -> str:
    """The first line of a written preset: where an editor finds the installed schema."""
    return f"# yaml-language-server: $schema={SCHEMA_FILE.resolve().as_uri()}\n"


def write_schema_file() -> None:
    """Regenerate the shipped ``preset.schema.json`` from the records."""
    SCHEMA_FILE.write_text(schema_text())
