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

from autotune.core.json_schema_from_records import json_schema
from autotune.preset.json_schema_file import (
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
        'python -c "import autotune.preset.json_schema_file as s; s.write_schema_file()"'
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

    from autotune.core.validator import Section, positive

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Rec(Section):
        rate: float | None = None
        _rules = {"rate": positive}

    schema = json_schema(Rec)
    assert schema["properties"]["rate"]["anyOf"][0] == {"type": "number", "exclusiveMinimum": 0}
    assert schema["additionalProperties"] is False


def _modeline_target(line: str, folder: Path) -> Path:
    prefix = "# yaml-language-server: $schema="
    assert line.startswith(prefix)
    return (folder / line.removeprefix(prefix).rstrip("\n")).resolve()


def test_the_comment_names_the_installed_schema_file_from_the_presets_folder(
    tmp_path: Path,
) -> None:
    line = schema_comment(tmp_path)
    assert _modeline_target(line, tmp_path) == SCHEMA_FILE.resolve()
    assert "file:" not in line  # a path from the file, which an editor resolves from it
    assert preset_json_schema()["title"] == "autotune preset"


def test_the_comment_keeps_the_home_folder_out_of_a_shared_preset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preset is shared: the absolute path of the package named its author's home
    folder (``file:///home/alice/.venv/...``). Inside the home folder the path from the
    preset's folder names neither; from outside it would, and the line is left out."""
    import autotune.preset.json_schema_file as module

    home = tmp_path / "home" / "alice"
    schema = home / ".venv" / "site-packages" / "autotune" / "preset" / "preset.schema.json"
    monkeypatch.setattr(module, "SCHEMA_FILE", schema)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    monkeypatch.setattr(module.getpass, "getuser", lambda: "alice")
    project = home / "project"
    inside = schema_comment(project)
    assert _modeline_target(inside, project) == schema.resolve()
    assert "alice" not in inside and str(home) not in inside
    assert schema_comment(tmp_path / "elsewhere") == ""


def test_a_saved_preset_names_the_schema_on_its_first_line(tmp_path: Path) -> None:
    from autotune.preset import load_preset, preset_from_dict, save_preset

    preset = preset_from_dict(_a_preset())
    path = save_preset(preset, tmp_path / "runs" / "p.yaml")
    first = path.read_text().splitlines()[0]
    assert _modeline_target(first, path.parent) == SCHEMA_FILE.resolve()
    assert load_preset(path) == preset
