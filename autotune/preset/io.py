"""Presets as plain data, YAML text and files.

``preset_from_dict`` is the one boundary between YAML and the typed objects: it reports
every problem at once, each with its path (``config.precision: expected one of fp32, tf32,
bf16, fp16; got 'fp8'``), migrates older schema versions and refuses newer ones.
``load_preset`` reads files with ``yaml.safe_load`` only (a preset is data: reading one
never constructs a Python object); ``save_preset`` writes atomically. A preset as data
never holds a secret: ``preset_to_dict`` (behind every file written from a preset)
redacts the study's storage URL by ``autotune.core.redact``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config.train_config import TrainConfig
from autotune.core.errors import PresetError, UsageError
from autotune.core.files import (
    atomic_write_text,
    check_output_path,
    is_text_path,
    not_ours_problem,
    read_capped,
)
from autotune.core.redact import redact
from autotune.core.text import one_line
from autotune.core.units import format_bytes
from autotune.core.validator import Section, build, plain_copy, show, type_name
from autotune.preset.json_schema_file import REQUIRED_IN_A_FILE, schema_comment
from autotune.preset.migrate import migrate_v1, v1_path
from autotune.preset.sections import OLDEST_SCHEMA_VERSION, PRESET_SCHEMA_VERSION, Preset

__all__ = [
    "dump_preset",
    "load_preset",
    "preset_error",
    "preset_from_dict",
    "preset_to_dict",
    "read_yaml",
    "save_preset",
]

_MAX_FILE_BYTES = 10 * 2**20  # a preset is a few KB; anything this large is not one


# -- plain data <-> Preset --------------------------------------------------------------------


def _section_dict(section: Section) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        if isinstance(value, TrainConfig):
            value = _config_dict(value)
        elif isinstance(value, Section):
            value = _section_dict(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], Section):
            value = [_section_dict(item) for item in value]
        else:
            value = plain_copy(value)
        out[f.name] = value
    return out


def _config_dict(config: TrainConfig) -> dict[str, Any]:
    return plain_copy(config.to_dict())


def preset_to_dict(preset: Preset) -> dict[str, Any]:
    """Plain, YAML-able data in a stable key order (the order of docs/preset-format.md),
    with no secret in it: the search's storage URL has its passwords redacted."""
    search = None if preset.search is None else _section_dict(preset.search)
    if search is not None:
        search["storage"] = redact(search["storage"])
    return {
        "schema_version": preset.schema_version,
        "name": preset.name,
        "created": preset.created,
        "model": _section_dict(preset.model),
        "task": _section_dict(preset.task),
        "budget_bytes": preset.budget_bytes,
        "config": _config_dict(preset.config),
        "measured": _section_dict(preset.measured),
        "baseline": None if preset.baseline is None else _section_dict(preset.baseline),
        "search": search,
        "race": None if preset.race is None else _section_dict(preset.race),
        "fingerprint": _section_dict(preset.fingerprint),
        "training": _section_dict(preset.training),
        "notes": preset.notes,
    }


def preset_error(message: str) -> PresetError:
    return PresetError([], context=message)


def preset_from_dict(data: Any, *, source: str = "<preset>") -> Preset:
    """Validate plain data (from YAML or JSON) into a ``Preset``.

    Every problem is reported at once with its path; an older schema version is migrated,
    a newer or unknown one refused. Raises ``PresetError`` (exit code 2).
    """
    if not isinstance(data, Mapping):
        raise preset_error(
            f"{source} is not an autotune preset: expected a mapping of fields at the top "
            f"level, got {type_name(data)}"
        )
    if "schema_version" not in data:
        raise PresetError(
            [
                f"schema_version: missing (every preset starts with schema_version: "
                f"{PRESET_SCHEMA_VERSION})"
            ],
            context=f"{source} is not a valid autotune preset",
        )
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise PresetError(
            [f"schema_version: expected an integer; got {show(version)}"],
            context=f"invalid preset {source}",
        )
    if version > PRESET_SCHEMA_VERSION:
        raise preset_error(
            f"{source} has preset schema version {version}, newer than this autotune reads "
            f"(versions {OLDEST_SCHEMA_VERSION} to {PRESET_SCHEMA_VERSION}); upgrade "
            "autotune (pip install -U autotune-train) to use it"
        )
    if version < OLDEST_SCHEMA_VERSION:
        raise preset_error(
            f"{source} has unknown preset schema version {version}; this autotune reads "
            f"versions {OLDEST_SCHEMA_VERSION} to {PRESET_SCHEMA_VERSION}"
        )
    problems: list[str] = []
    if version == 1:
        migrated = migrate_v1(data, problems)
        later: list[str] = []
        preset = build(Preset, migrated, "", later, required=REQUIRED_IN_A_FILE)
        problems += [v1_path(p) for p in later]  # in the names the file uses
        if problems or not isinstance(preset, Preset):
            unique = list(dict.fromkeys(problems))
            raise PresetError(unique, context=f"invalid preset {source} (schema version 1)")
        return preset
    preset = build(Preset, data, "", problems, required=REQUIRED_IN_A_FILE)
    if problems or not isinstance(preset, Preset):
        raise PresetError(problems, context=f"invalid preset {source}")
    return preset


# -- YAML files ---------------------------------------------------------------------------


def _yaml_text(data: Any) -> str:
    """``data`` as YAML that reads back equal: non-ASCII text as it is where PyYAML
    round-trips it, escaped where it does not (it emits U+0085 raw and reads it changed)."""
    import yaml

    text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False, allow_unicode=True)
    if yaml.safe_load(text) != data:
        text = yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    return text


def dump_preset(preset: Preset) -> str:
    """The preset as YAML text, with a header comment saying what it is."""
    measured = preset.measured.throughput
    figure = f"{measured[0]:,.1f} {measured[1]}" if measured else "no throughput recorded"
    if preset.baseline is not None and preset.baseline.speedup is not None:
        figure += f" ({preset.baseline.speedup:.2f}x the naive config)"
    budget = "none"
    if preset.budget_bytes:
        budget = f"{preset.budget_bytes / 1e9:.2f} GB ({format_bytes(preset.budget_bytes)})"
    header = [
        f"autotune preset, schema version {preset.schema_version} "
        "(field reference: docs/preset-format.md)",
        f"{preset.name}: model {preset.model.name}, budget {budget}",
        f"measured on {preset.fingerprint.describe()}: {figure}",
        "re-measure on this machine with: autotune presets check <this file>",
    ]
    body = _yaml_text(preset_to_dict(preset))
    return "".join(f"# {one_line(line)}\n" for line in header) + body


A_PRESET = "an autotune preset"  # what only a preset output replaces (not_ours_problem)


def looks_like_preset(path: Path) -> bool:
    """Whether ``path`` reads as a preset: YAML whose top holds ``schema_version`` and
    ``config`` (what ``presets list`` shows, and what a search may write over)."""
    try:
        data = read_yaml(path)
    except PresetError:
        return False
    return isinstance(data, Mapping) and "schema_version" in data and "config" in data


def save_preset(preset: Preset, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``preset`` to ``path`` atomically (``autotune.core.files.atomic_write_text``): a
    crash leaves the old file or the new one, never half of one. Its first line names the
    installed JSON Schema (from the file's folder), so an editor with the YAML language
    server checks the file. ``overwrite`` replaces a preset (or an empty file), never
    another file."""
    if not isinstance(preset, Preset):  # an AttributeError from inside
        raise preset_error(f"save_preset: expected a Preset, got {type(preset).__name__}")
    if not is_text_path(path) or "\0" in os.fspath(path):
        shown = repr(os.fspath(path)) if is_text_path(path) else type(path).__name__
        raise preset_error(
            f"save_preset: expected the file's path (a str or Path, no NUL character), got {shown}"
        )
    target = Path(path).expanduser()
    text = schema_comment(target.parent) + dump_preset(preset)  # a failure writes nothing
    if target.is_dir():
        raise preset_error(f"cannot write preset to {str(target)!r}: it is a directory")
    try:
        check_output_path(path)  # a device, a FIFO; newdir/, which names a folder
    except UsageError as exc:
        raise preset_error(f"cannot write the preset: {exc}") from None
    if not overwrite and target.exists():
        raise preset_error(
            f"preset file {str(target)!r} already exists (overwrite it, or pick a name)"
        )
    if problem := not_ours_problem(target, looks_like_preset, what=A_PRESET, by="saving"):
        raise preset_error(f"{str(target)!r} {problem}")
    try:
        atomic_write_text(target, text, overwrite=overwrite)
    except FileExistsError:
        raise preset_error(
            f"preset file {str(target)!r} already exists (overwrite it, or pick a name)"
        ) from None
    except OSError as exc:
        raise preset_error(
            f"cannot write preset to {str(target)!r}: {exc.strerror or exc}"
        ) from None
    return target


def read_yaml(path: Path) -> Any:
    """Read a YAML file with ``yaml.safe_load``; every failure is a one-paragraph PresetError.
    The file is read by the one rule for a user's path (``autotune.core.files``): a
    regular file of at most 10 MiB; a device, a FIFO, a folder or a link to one is refused
    with what it is."""
    import yaml

    where = str(path)
    raw = read_capped(
        path,
        limit=_MAX_FILE_BYTES,
        what="preset file",
        error=preset_error,
        advice="a preset is a few KB of YAML",
    )
    if b"\x00" in raw:
        raise preset_error(f"{where!r} is a binary file, not a YAML preset")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise preset_error(
            f"{where!r} is not UTF-8 text (byte {exc.start}), so not a YAML preset"
        ) from None
    if not text.strip():
        raise preset_error(f"preset file {where!r} is empty")
    try:
        return yaml.load(text, Loader=_loader())  # a SafeLoader: plain data only
    except _NotPlainData as exc:
        raise preset_error(f"{where!r} is not a preset: {exc.problem}{_mark(exc)}") from None
    except yaml.constructor.ConstructorError as exc:
        tag = one_line(str(exc.problem or ""))
        raise preset_error(
            f"{where!r} uses a YAML tag that autotune does not load ({tag}{_mark(exc)}); "
            "presets are plain data, and tags such as !!python/object that would construct "
            "Python objects are refused"
        ) from None
    except yaml.YAMLError as exc:
        raise preset_error(f"{where!r} is not valid YAML: {_yaml_problem(exc)}") from None
    except (RecursionError, ValueError, OverflowError) as exc:
        raise preset_error(f"{where!r} cannot be read as YAML: {type(exc).__name__}") from None


class _NotPlainData(Exception):
    """A mapping whose keys are no preset's: one written twice, or a key that is a list or
    a mapping (YAML allows both; a preset never needs them)."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def _loader() -> type:
    """``yaml.SafeLoader`` that refuses a key written twice in one mapping: PyYAML keeps the
    last one, so a shared preset could show one ``name:`` at its top and run with another
    at its bottom. A merge (``<<: *anchor``) may still be overridden, as YAML says."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _NotPlainData("a key is a list or a mapping", key_node.start_mark)
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise _NotPlainData(f"the key {key!r} is written twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeys


def _mark(exc: Any) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(exc: Exception) -> str:
    problem = getattr(exc, "problem", None)
    if problem:
        return one_line(str(problem)) + _mark(exc)
    return one_line(str(exc))


def load_preset(path: str | Path) -> Preset:
    """Read and validate a preset file. Any problem is a ``PresetError`` (exit code 2)."""
    if not is_text_path(path):
        raise preset_error(
            f"load_preset: expected the preset file's path (a str or Path), got "
            f"{type(path).__name__}"
        )
    target = Path(path).expanduser()
    data = read_yaml(target)
    if data is None:
        raise preset_error(f"preset file {str(target)!r} is empty (nothing but comments)")
    return preset_from_dict(data, source=str(target))
