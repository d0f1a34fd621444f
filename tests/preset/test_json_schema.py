"""The preset's JSON Schema: generated from the records, shipped current, and agreeing with
the validator on the shipped presets and on bad ones."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from autotune.core.jsonschema import json_schema
from autotune.preset.json_schema import (
    SCHEMA_FILE,
    preset_json_schema,
    schema_comment,
    schema_text,
)

PRESETS = sorted((Path(__file__).resolve().parents[2] / "presets").rglob("*.yaml"))


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_shipped_schema_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text() == schema_text(), (
        "autotune/preset/preset.schema.json is stale: run "
        'python -c "import autotune.preset.json_schema as s; s.write_schema_file()"'
    )


@pytest.mark.parametrize("path", PRESETS, ids=lambda p: p.name)
def test_every_shipped_preset_meets_the_schema(path: Path) -> None:
    errors = list(_validator().iter_errors(yaml.safe_load(path.read_text())))
    assert not errors, [e.message for e in errors]


def _a_preset() -> dict[str, Any]:
    assert PRESETS, "no preset shipped"
    data = yaml.safe_load(PRESETS[0].read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("config", "precision"), "fp8"),  # not one of the allowed values
        (("config", "micro_batch"), "8"),  # a string where an integer goes
        (("task", "global_batch"), 0),  # the rule says > 0
        (("config", "no_such_knob"), 1),  # an unknown key
    ],
)
def test_the_schema_rejects_what_the_validator_rejects(where: tuple[str, str], value: Any) -> None:
    from autotune.core.errors import PresetError
    from autotune.preset import preset_from_dict

    data = copy.deepcopy(_a_preset())
    data[where[0]][where[1]] = value
    assert list(_validator().iter_errors(data)), f"the schema accepts {where}={value!r}"
    with pytest.raises(PresetError):
        preset_from_dict(data)


def test_optional_numbers_keep_their_bounds() -> None:
    import dataclasses

    from autotune.core.schema import Section, positive

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Rec(Section):
        rate: float | None = None
        _rules = {"rate": positive}

    schema = json_schema(Rec)
    assert schema["properties"]["rate"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0}
    assert schema["additionalProperties"] is False


def test_the_comment_names_the_installed_schema_file() -> None:
    line = schema_comment()
    assert line.startswith("# yaml-language-server: $schema=file://")
    assert line.rstrip().endswith("/autotune/preset/preset.schema.json")
    assert preset_json_schema()["title"] == "autotune preset"


def test_a_saved_preset_names_the_schema_on_its_first_line(tmp_path: Path) -> None:
    from autotune.preset import load_preset, preset_from_dict, save_preset

    preset = preset_from_dict(_a_preset())
    path = save_preset(preset, tmp_path / "p.yaml")
    first = path.read_text().splitlines()[0]
    assert first == schema_comment().rstrip("\n")
    assert load_preset(path) == preset
