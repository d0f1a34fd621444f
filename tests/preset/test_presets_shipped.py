"""Every preset shipped in presets/ (found recursively) loads, validates, and describes a
real measurement of a built-in model that its config can run on its own hardware."""

from __future__ import annotations

from pathlib import Path

import pytest

from autotune.config.checks import check_config
from autotune.core.device_caps import DeviceCaps
from autotune.preset import Preset, find_presets, load_preset, preset_from_dict, preset_to_dict

PRESETS_DIR = Path(__file__).resolve().parents[2] / "presets"
# Recursive on purpose: a flat listdir once left most of torchtune's configs untested.
SHIPPED = sorted(PRESETS_DIR.rglob("*.yaml"))
# The floor: mu and gpt-small measured on a CPU like the development machine.
REQUIRED = {("mu", "cpu"), ("gpt-small", "cpu")}

params = [pytest.param(p, id=str(p.relative_to(PRESETS_DIR))) for p in SHIPPED]


def caps_of(preset: Preset) -> DeviceCaps:
    """What the preset's own device could do, from its fingerprint."""
    fp = preset.fingerprint
    ampere = fp.compute_capability is not None and float(fp.compute_capability) >= 8.0
    cuda = fp.device_kind == "cuda"
    return DeviceCaps(
        device="cuda:0" if cuda else "cpu",
        kind=fp.device_kind,
        name=fp.device_name,
        total_memory_bytes=fp.memory_bytes,
        bf16=ampere if cuda else True,
        bf16_native=ampere if cuda else False,
        fp16=cuda,
        tf32=cuda and ampere,
        compile=True,
    )


def test_the_folder_exists_and_ships_only_yaml() -> None:
    assert PRESETS_DIR.is_dir()
    # package-data ships presets/**/*.yaml: a .yml file would silently not be installed.
    assert sorted(PRESETS_DIR.rglob("*.yml")) == []


def test_the_required_presets_ship() -> None:
    shipped = {(p.model.name, p.fingerprint.device_kind) for p in map(load_preset, SHIPPED)}
    assert shipped >= REQUIRED, f"missing: {sorted(REQUIRED - shipped)}"


def test_the_glob_finds_what_autotune_finds() -> None:
    found = {path.resolve() for origin, path in find_presets() if origin == "builtin"}
    assert found == {path.resolve() for path in SHIPPED}


def test_shipped_preset_names_are_unique() -> None:
    names = [load_preset(path).name for path in SHIPPED]
    assert len(names) == len(set(names)), names


@pytest.mark.parametrize("path", params)
def test_shipped_preset_is_valid(path: Path) -> None:
    preset = load_preset(path)
    assert preset_from_dict(preset_to_dict(preset)) == preset
    measured = preset.measured
    assert measured.throughput is not None, "a shipped preset states what it measured"
    assert measured.step_time_median_s is not None and measured.peak_memory_bytes is not None
    if preset.baseline is not None:
        assert preset.baseline.speedup is not None and preset.baseline.speedup > 0
    assert ":" not in preset.model.name, "shipped presets use built-in models only"

    from autotune.models.registry import builtin_names, get_model

    assert preset.model.name in builtin_names()
    spec = get_model(preset.model.name)
    if preset.model.args:
        spec = spec.with_args(**preset.model.args)
    check_config(preset.config, spec=spec, device=caps_of(preset))
