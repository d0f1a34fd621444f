"""``--set section.field=value``: a run's config and training settings overridden from the
command line (``autotune train --set config.micro_batch=4 --set training.lr=1e-3``), every
bad override reported at once."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.config.parallel import with_strategy_knobs_reset
from autotune.config.train_config import TrainConfig, TrainingDefaults, did_you_mean
from autotune.core.errors import ConfigError, PresetError

__all__ = ["apply_overrides", "parse_value"]

_FLOAT_TEXT = ("e", "E", ".", "inf", "nan")


def parse_value(text: str) -> Any:
    """A ``--set`` value: YAML scalars (``4``, ``true``, ``null``, ``bf16``), ``3e-4`` a float."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and any(s in value for s in _FLOAT_TEXT):
        try:
            return float(value)
        except ValueError:
            return value
    return value


# YAML 1.1 reads these words as booleans; a field that holds text means the word itself.
_YAML11_BOOL_WORDS = frozenset({"yes", "no", "on", "off", "y", "n"})


def _like(value: Any, raw: str, current: Any) -> Any:
    """``value`` (``raw`` parsed) as the field that holds ``current`` takes it: where the
    field holds text (``compile: off``), a word YAML 1.1 took for a boolean is the word."""
    text = raw.strip()
    if isinstance(value, bool) and isinstance(current, str) and text.lower() in _YAML11_BOOL_WORDS:
        return text
    return value


def apply_overrides(
    config: TrainConfig, training: TrainingDefaults, overrides: Sequence[str]
) -> tuple[TrainConfig, TrainingDefaults]:
    """Apply ``section.field=value`` overrides (``config.micro_batch=4``,
    ``config.knobs.block_group=2``, ``training.lr=1e-3``); every bad one reported at once.
    ``config.parallel.strategy`` set to the other strategy puts the knobs of the one it
    left back at their defaults (unless the overrides set them too)."""
    config_data = config.to_dict()
    training_data = dataclasses.asdict(training)
    training_names = list(training_data)
    problems: list[str] = []
    parallel_given: set[str] = set()
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"--set {item!r}: expected KEY=VALUE, e.g. config.micro_batch=4")
            continue
        value = parse_value(raw.strip())
        section, _, name = key.partition(".")
        if section == "config" and name:
            if name.startswith("knobs."):
                knobs = config_data["knobs"]
                if not isinstance(knobs, Mapping):  # an earlier --set config.knobs=0
                    problems.append(f"--set {key}: config.knobs is {knobs!r}, not a mapping")
                    continue
                knob = name.removeprefix("knobs.")
                config_data["knobs"] = {**knobs, knob: _like(value, raw, knobs.get(knob))}
            elif name.startswith("parallel."):
                parallel = config_data.get("parallel")
                if not isinstance(parallel, Mapping):
                    problems.append(f"--set {key}: this config has no parallel section")
                    continue
                field = name.removeprefix("parallel.")
                config_data["parallel"] = {**parallel, field: value}
                parallel_given.add(field)
            elif "." in name:
                problems.append(f"--set {key}: config.{name.split('.')[0]} has no sub-fields")
            else:
                # unknown names are reported by from_mapping
                config_data[name] = _like(value, raw, config_data.get(name))
        elif section == "training" and name:
            if name not in training_names:
                problems.append(
                    f"--set {key}: unknown field{did_you_mean(name, training_names)} (training "
                    f"fields: {', '.join(training_names)})"
                )
            else:
                training_data[name] = value
        else:
            problems.append(
                f"--set {key}: expected config.FIELD, config.knobs.NAME, config.parallel.NAME "
                "or training.FIELD"
            )
    moved = config_data.get("parallel")
    if parallel_given and config.parallel is not None and isinstance(moved, Mapping):
        config_data["parallel"] = with_strategy_knobs_reset(
            config.parallel.to_dict(), moved, parallel_given
        )
    new_config, new_training = config, training
    try:
        new_config = TrainConfig.from_mapping(config_data)
    except ConfigError as exc:
        problems += exc.problems
    try:
        new_training = TrainingDefaults(**training_data)
    except PresetError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems, context="invalid --set override")
    return new_config, new_training
