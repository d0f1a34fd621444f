"""The preset's JSON Schema, shipped in the package so that an editor checks a preset as
it is typed: ``preset.schema.json`` beside this module, generated from the preset's records.

Every preset autotune writes starts with a ``# yaml-language-server: $schema=...`` line
naming the installed file (YAML ignores it) by its path from the preset's folder, which
the YAML language server resolves from the file: a preset is shared, and the absolute
path would carry its author's home folder and user name. Where the relative path would
name them too (a preset outside the home folder, the package inside it), the line is left
out. After a change to the records, regenerate the file with
``python -c "import autotune.preset.json_schema_file as s; s.write_schema_file()"``; a test
fails while it is stale.
"""

from __future__ import annotations

import contextlib
import getpass
import json
import os
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
    from autotune.core.json_schema_from_records import json_schema
    from autotune.preset.sections import Preset

    return json_schema(Preset, title="autotune preset", required=REQUIRED_IN_A_FILE)


def schema_text() -> str:
    """The schema as the shipped file holds it."""
    return json.dumps(preset_json_schema(), indent=2, sort_keys=False) + "\n"


def schema_comment(folder: Path) -> str:
    """The first line of a preset written in ``folder``: where an editor finds the
    installed schema, as a path from ``folder``; "" where that path would name the home
    folder or the user (the module docstring)."""
    try:
        relative = Path(os.path.relpath(SCHEMA_FILE.resolve(), folder.resolve()))
    except ValueError:  # another drive (Windows): no relative path
        return ""
    if _names_the_user(relative):
        return ""
    return f"# yaml-language-server: $schema={relative.as_posix()}\n"


def _names_the_user(path: Path) -> bool:
    """Whether a folder of ``path`` is the home folder's or carries the user's name."""
    names = {Path.home().name}
    with contextlib.suppress(KeyError, OSError):  # no user name anywhere: the home's
        names.add(getpass.getuser())
    names.discard("")
    return any(part in names for part in path.parts if part != "..")


def write_schema_file() -> None:
    """Regenerate the shipped ``preset.schema.json`` from the records."""
    SCHEMA_FILE.write_text(schema_text())
