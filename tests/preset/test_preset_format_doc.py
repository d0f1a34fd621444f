"""docs/preset-format.md's field tables hold exactly the fields of the preset's JSON Schema,
section by section, and say "required" exactly where the schema requires a field: the
tables' prose is written by hand, their rows cannot drift from the records."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autotune.preset.json_schema_file import preset_json_schema

DOC = Path(__file__).resolve().parents[2] / "docs" / "preset-format.md"

# heading of docs/preset-format.md -> the schema's record, and which of the section's
# tables holds it (config's second table is its parallel record)
SECTIONS = {
    ("Top level", 0): None,  # the root
    ("`model`", 0): "ModelRef",
    ("`task`", 0): "Task",
    ("`config`", 0): "TrainConfig",
    ("`config`", 1): "ParallelConfig",
    ("`measured`", 0): "Measured",
    ("`baseline`", 0): "Baseline",
    ("`search`", 0): "SearchSummary",
    ("`race`", 0): "Race",
    ("`fingerprint`", 0): "Fingerprint",
    ("`training`", 0): "TrainingDefaults",
}


def _tables(text: str) -> dict[tuple[str, int], list[list[str]]]:
    """Each table of each ``###`` section: its body rows, split into cells."""
    found: dict[tuple[str, int], list[list[str]]] = {}
    heading, index, rows = "", -1, None
    for line in [*text.splitlines(), ""]:
        if line.startswith("### "):
            heading, index = line[4:].strip(), -1
        if line.startswith("|") and heading:
            if rows is None:
                rows, index = [], index + 1
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not set("".join(cells)) <= set("-: "):
                rows.append(cells)
        elif rows is not None:
            found[(heading, index)] = rows[1:]  # without the header row
            rows = None
    return found


def _record(name: str | None) -> dict:
    schema = preset_json_schema()
    return schema if name is None else schema["$defs"][name]


@pytest.mark.parametrize(("section", "record"), list(SECTIONS.items()), ids=str)
def test_each_table_lists_exactly_the_records_fields(
    section: tuple[str, int], record: str | None
) -> None:
    rows = _tables(DOC.read_text())[section]
    documented = {row[0].strip("`") for row in rows}
    fields = set(_record(record)["properties"])
    assert documented == fields, (
        f"{section[0]}: documented but not a field: {sorted(documented - fields)}; "
        f"a field not documented: {sorted(fields - documented)}"
    )


@pytest.mark.parametrize(("section", "record"), list(SECTIONS.items()), ids=str)
def test_a_table_says_required_exactly_where_the_schema_requires(
    section: tuple[str, int], record: str | None
) -> None:
    rows = _tables(DOC.read_text())[section]
    required = set(_record(record).get("required", []))
    said = {row[0].strip("`") for row in rows if "required" in row[1]}
    assert said == required, f"{section[0]}: says required {sorted(said)}, is {sorted(required)}"
