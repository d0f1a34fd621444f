"""Schema version 1 presets: migrated on load, problems reported in version 1 names."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from fake_presets import A100, CPU_MODEL, GiB, make_config

from autotune.core.errors import PresetError
from autotune.preset import (
    PRESET_SCHEMA_VERSION,
    ModelRef,
    SearchSummary,
    Task,
    TrainingDefaults,
    dump_preset,
    preset_from_dict,
    preset_to_dict,
)


def v1_preset() -> dict[str, Any]:
    config = make_config(precision="bf16", grad_accum=8).to_dict()  # 8 x 8 = global_batch
    return {
        "schema_version": 1,
        "name": "mu-a100",
        "created": "2024-01-02T03:04:05Z",
        "model": "mu",
        "model_args": {"n_layer": 4},
        "seq_len": 256,
        "global_batch": 64,
        "budget": "8GB",
        "config": config,
        "hardware": {
            "device": "cuda:1",
            "name": A100,
            "memory_bytes": 80 * GiB,
            "compute_capability": "8.0",
            "driver": "535.1",
            "cuda": "12.1",
            "torch": "2.1.0",
            "autotune": "0.0.3",
            "cpu": CPU_MODEL,
            "cores": 32,
        },
        "measured": {"tokens_per_s": 90000.0, "step_time_s": 0.18, "peak_memory_bytes": 7 * 10**9},
        "baseline": {"config": make_config(micro_batch=1, grad_accum=64).to_dict(), "speedup": 3.0},
        "search": {"trials": 30, "wall_s": 600.0, "study": "s", "storage": "sqlite:///s.db"},
        "notes": "old",
    }


def test_a_version_1_preset_is_migrated() -> None:
    preset = preset_from_dict(v1_preset())
    assert preset.schema_version == PRESET_SCHEMA_VERSION
    assert preset.model == ModelRef(name="mu", args={"n_layer": 4})
    assert preset.task == Task(seq_len=256, global_batch=64)
    assert preset.budget_bytes == 8 * 10**9
    assert preset.config.precision == "bf16"
    fp = preset.fingerprint
    assert (fp.device_kind, fp.device_name, fp.cpu_cores) == ("cuda", A100, 32)
    assert (fp.driver_version, fp.cuda_version, fp.torch_version) == ("535.1", "12.1", "2.1.0")
    assert preset.measured.step_time_median_s == 0.18
    assert preset.measured.tokens_per_s == 90000.0
    assert preset.baseline is not None and preset.baseline.speedup == 3.0
    assert preset.search == SearchSummary(
        trials_run=30, wall_s=600.0, study_name="s", storage="sqlite:///s.db"
    )
    assert preset.search.objective == "throughput" and preset.search.sampler == "tpe"
    assert preset.training == TrainingDefaults()  # v1 had none: the defaults
    # Saving writes the current version, which loads back equal.
    assert preset_from_dict(yaml.safe_load(dump_preset(preset))) == preset
    assert preset_to_dict(preset)["schema_version"] == 2


def test_a_version_1_budget_may_be_a_fraction_or_null() -> None:
    data = v1_preset()
    data["budget"] = "0.5"
    assert preset_from_dict(data).budget_bytes == 40 * GiB
    data["budget"] = None
    assert preset_from_dict(data).budget_bytes is None


def test_version_1_problems_are_reported_in_version_1_names() -> None:
    data = v1_preset()
    data["budget"] = "lots"
    data["hardware"]["cores"] = "many"
    data["hardware"]["gpu"] = "x"
    data["measured"]["step_time_s"] = -1
    data["seq_len"] = 0
    data["search"]["trials"] = None
    data["hardwear"] = {}
    del data["model"]
    with pytest.raises(PresetError) as info:
        preset_from_dict(data, source="old.yaml")
    problems = info.value.problems
    assert str(info.value).startswith("invalid preset old.yaml (schema version 1):")
    assert problems[0] == "hardwear: unknown field (did you mean 'hardware'?)"
    assert any(p.startswith("hardware.gpu: unknown field") for p in problems)
    assert any(p.startswith("budget: cannot read budget 'lots'") for p in problems)
    assert "hardware.cores: expected an integer; got 'many'" in problems
    assert "measured.step_time_s: expected a number >= 0; got -1.0" in problems
    assert "seq_len: expected a positive integer; got 0" in problems
    assert "search.trials: expected an integer; got None" in problems
    assert "model: missing required field" in problems
