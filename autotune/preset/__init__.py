"""Presets: the versioned, validated, portable YAML record of a tuned config (docs/design.md,
principle 6).

- ``schema``: the sections of a preset (``Preset``, ``ModelRef``, ``Task``,
  ``Fingerprint``, ``Measured``, ``Baseline``, ``SearchSummary``, ``Race``; ``TrainingDefaults``
  lives in autotune/config/train_config.py), each validated on construction;
- ``io``: plain data, YAML text and files (``preset_from_dict``, ``load_preset``,
  ``save_preset``, ...);
- ``migrate``: older schema versions, migrated on load;
- ``portability``: this machine against the one a preset was measured on;
- ``library``: the shipped and user presets found by name, and the working directory's listed.

The field reference is docs/preset-format.md.
"""

from __future__ import annotations

from autotune.config.train_config import TrainingDefaults
from autotune.preset.io import (
    dump_preset,
    load_preset,
    preset_from_dict,
    preset_to_dict,
    save_preset,
)
from autotune.preset.library import (
    builtin_preset_dir,
    find_presets,
    preset_ref,
    resolve_preset,
    user_preset_dir,
)
from autotune.preset.portability import (
    PortabilityReport,
    check_portability,
    default_device_for,
)
from autotune.preset.sections import (
    PRESET_SCHEMA_VERSION,
    Baseline,
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    Race,
    RaceEntry,
    SearchSummary,
    Task,
    utc_now,
)

__all__ = [
    "PRESET_SCHEMA_VERSION",
    "Baseline",
    "Fingerprint",
    "Measured",
    "ModelRef",
    "PortabilityReport",
    "Preset",
    "Race",
    "RaceEntry",
    "SearchSummary",
    "Task",
    "TrainingDefaults",
    "builtin_preset_dir",
    "check_portability",
    "default_device_for",
    "dump_preset",
    "find_presets",
    "load_preset",
    "preset_from_dict",
    "preset_ref",
    "preset_to_dict",
    "resolve_preset",
    "save_preset",
    "user_preset_dir",
    "utc_now",
]
