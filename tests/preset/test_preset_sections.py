"""The preset's sections and the validating boundary: every problem at once, with its path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fake_presets import (
    A100,
    CPU_MODEL,
    GiB,
    cpu_fingerprint,
    make_gpu,
    make_preset,
    make_profile,
    problems_of,
)

from autotune.burst.result import BurstResult
from autotune.core.errors import HardwareMismatchError, PresetError
from autotune.preset import (
    PRESET_SCHEMA_VERSION,
    Fingerprint,
    Measured,
    TrainingDefaults,
    preset_from_dict,
    preset_to_dict,
)


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    data = preset_to_dict(make_preset())
    data["config"]["precision"] = "fp8"
    data["training"]["lr"] = "fast"
    data["traning"] = {}
    del data["task"]["seq_len"]
    data["fingerprint"]["device_kind"] = "tpu"
    data["measured"]["peak_memory_bytes"] = -5
    data["search"]["trials_run"] = 2.5
    problems = problems_of(data)
    assert problems == [
        "traning: unknown field (did you mean 'training'?)",
        "task.seq_len: missing required field",
        "config.precision: expected one of fp32, tf32, bf16, fp16; got 'fp8'",
        "measured.peak_memory_bytes: expected a number >= 0; got -5",
        "search.trials_run: expected an integer; got 2.5",
        "fingerprint.device_kind: expected one of cpu, cuda; got 'tpu'",
        "training.lr: expected a number; got 'fast'",
    ]


def test_the_error_message_names_the_file_and_every_problem() -> None:
    data = preset_to_dict(make_preset())
    data["config"]["precision"] = "fp8"
    data["task"]["global_batch"] = 0
    with pytest.raises(PresetError) as info:
        preset_from_dict(data, source="best.yaml")
    message = str(info.value)
    assert message.startswith("invalid preset best.yaml:")
    assert "config.precision: expected one of fp32, tf32, bf16, fp16; got 'fp8'" in message
    assert "task.global_batch: expected a positive integer; got 0" in message
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("where", "key", "hint"),
    [
        ((), "fingerprnt", "fingerprint"),
        (("config",), "micro_bach", "micro_batch"),
        (("training",), "warmup", "warmup_steps"),
        (("measured",), "tokens_per_sec", "tokens_per_s"),
        (("baseline", "config"), "precison", "precision"),
    ],
)
def test_unknown_keys_are_errors_with_did_you_mean(
    where: tuple[str, ...], key: str, hint: str
) -> None:
    data = preset_to_dict(make_preset())
    section = data
    for name in where:
        section = section[name]
    section[key] = 1
    path = ".".join((*where, key))
    assert f"{path}: unknown field (did you mean {hint!r}?)" in problems_of(data)


def test_missing_required_fields_are_listed() -> None:
    data = preset_to_dict(make_preset())
    for key in ("name", "created", "config", "measured", "fingerprint"):
        del data[key]
    del data["model"]["name"]
    problems = problems_of(data)
    for path in ("name", "created", "config", "measured", "fingerprint", "model.name"):
        assert f"{path}: missing required field" in problems


def test_optional_sections_may_be_omitted_or_null() -> None:
    data = preset_to_dict(make_preset())
    for key in ("baseline", "search", "training", "notes", "budget_bytes"):
        del data[key]
    preset = preset_from_dict(data)
    assert preset.baseline is None and preset.search is None
    assert preset.training == TrainingDefaults()
    assert preset.budget_bytes is None and preset.notes == ""


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        ("name", 5, "name: expected a string; got 5"),
        ("name", "  ", "name: must not be empty"),
        ("model", "mu", "model: expected a mapping; got 'mu'"),
        ("model.args", [1], "model.args: expected a mapping; got [1]"),
        ("model.sha256", "abc", "model.sha256: expected 64 lowercase hex digits (a SHA-256)"),
        ("task.seq_len", True, "task.seq_len: expected an integer; got True"),
        ("task.size_name", "image side", "task.size_name: expected a short name such as 'seq'"),
        ("budget_bytes", "8GB", "budget_bytes: expected an integer or null; got '8GB'"),
        ("config.micro_batch", "8", "config.micro_batch: expected a positive integer, got '8'"),
        ("config.knobs", {"block_group": [1]}, "config.knobs.block_group: expected a string"),
        ("measured.mfu", ".nan", "measured.mfu: expected a number or null; got '.nan'"),
        ("measured.tokens_per_s", float("inf"), "measured.tokens_per_s: expected a finite"),
        (
            "fingerprint.compute_capability",
            "sm80",
            "fingerprint.compute_capability: expected a compute capability such as '8.0'",
        ),
        ("fingerprint.cpu_cores", 0, "fingerprint.cpu_cores: expected a number > 0; got 0"),
        ("baseline.config.precision", "fp64", "baseline.config.precision: expected one of"),
        ("baseline.speedup", "2x", "baseline.speedup: expected a number or null; got '2x'"),
        ("search", [], "search: expected a mapping or null; got []"),
        ("training.schedule", "step", "training.schedule: expected one of cosine, constant"),
        ("training.label_smoothing", 1.0, "training.label_smoothing: expected a number in [0, 1)"),
        ("training.grad_clip", 0, "training.grad_clip: expected a number > 0; got 0.0"),
        ("notes", None, "notes: expected a string; got None"),
        ("schema_version", "2", "schema_version: expected an integer; got '2'"),
    ],
)
def test_bad_values_are_reported_with_their_path(path: str, value: Any, problem: str) -> None:
    data = preset_to_dict(make_preset())
    *parents, leaf = path.split(".")
    section = data
    for name in parents:
        section = section[name]
    section[leaf] = value
    problems = problems_of(data)
    assert any(p.startswith(problem) for p in problems), problems


def test_float_fields_accept_numbers_written_as_yaml_1_1_strings() -> None:
    data = preset_to_dict(make_preset())
    data["training"]["lr"] = "3e-4"  # what yaml.safe_load makes of `lr: 3e-4`
    data["training"]["weight_decay"] = 0  # an integer is a fine float
    training = preset_from_dict(data).training
    assert training.lr == 3e-4 and training.weight_decay == 0.0


def test_training_needs_steps_or_epochs_and_epochs_alone_means_epochs() -> None:
    data = preset_to_dict(make_preset())
    data["training"] = {"epochs": 3}
    training = preset_from_dict(data).training
    assert training.epochs == 3 and training.max_steps is None
    data["training"] = {"max_steps": None}
    assert "training: set max_steps or epochs" in problems_of(data)[0]


def test_schema_version_missing_newer_or_unknown_is_refused() -> None:
    data = preset_to_dict(make_preset())
    del data["schema_version"]
    with pytest.raises(PresetError, match="schema_version: missing"):
        preset_from_dict(data)
    data["schema_version"] = PRESET_SCHEMA_VERSION + 1
    with pytest.raises(PresetError, match=r"schema version 3, newer.*upgrade autotune"):
        preset_from_dict(data)
    data["schema_version"] = 0
    with pytest.raises(PresetError, match="unknown preset schema version 0"):
        preset_from_dict(data)


@pytest.mark.parametrize("data", [None, [], "text", 5, [{"schema_version": 2}]])
def test_a_top_level_that_is_not_a_mapping_is_refused(data: Any) -> None:
    with pytest.raises(PresetError, match="expected a mapping of fields at the top level"):
        preset_from_dict(data)


def test_direct_construction_is_validated_too() -> None:
    with pytest.raises(PresetError) as info:
        Measured(tokens_per_s=-1.0, mfu=float("nan"))
    assert info.value.problems == [
        "measured.tokens_per_s: expected a number >= 0; got -1.0",
        "measured.mfu: expected a finite number; got nan",
    ]
    with pytest.raises(PresetError, match="training: set max_steps or epochs"):
        TrainingDefaults(max_steps=None)
    with pytest.raises(PresetError, match="schema_version: a loaded preset is always version 2"):
        make_preset(schema_version=1)
    with pytest.raises(PresetError, match="created: expected an ISO 8601 UTC"):
        make_preset(created="last tuesday")
    # An integer where a float is declared is stored as a float.
    assert TrainingDefaults(lr=1).lr == 1.0 and isinstance(TrainingDefaults(lr=1).lr, float)


def test_measured_from_burst_copies_the_figures() -> None:
    result = BurstResult(
        status="ok",
        tokens_per_s=1000.5,
        samples_per_s=15.6,
        step_time_median_s=0.5,
        step_time_p90_s=0.6,
        peak_memory_bytes=123456,
        mfu=0.2,
        compile_s=3.5,
    )
    assert Measured.from_burst(result) == Measured(
        tokens_per_s=1000.5,
        samples_per_s=15.6,
        step_time_median_s=0.5,
        step_time_p90_s=0.6,
        peak_memory_bytes=123456,
        mfu=0.2,
        compile_s=3.5,
    )


def test_fingerprint_from_profile() -> None:
    profile = make_profile(gpus=(make_gpu(index=0), make_gpu(index=1, name="NVIDIA H100 PCIe")))
    cpu = Fingerprint.from_profile(profile, "cpu")
    assert cpu == cpu_fingerprint()
    gpu = Fingerprint.from_profile(profile, "cuda:1")
    assert gpu.device_kind == "cuda" and gpu.device_name == "NVIDIA H100 PCIe"
    assert gpu.compute_capability == "8.0" and gpu.memory_bytes == 80 * GiB
    assert gpu.cpu_model == CPU_MODEL and gpu.driver_version == "550.54.15"
    assert Fingerprint.from_profile(profile, "cuda").device_name == A100
    with pytest.raises(HardwareMismatchError, match="'cuda:2' does not exist here"):
        Fingerprint.from_profile(profile, "cuda:2")
    with pytest.raises(HardwareMismatchError, match="unknown device 'tpu'"):
        Fingerprint.from_profile(profile, "tpu")


def test_presets_are_compared_by_value() -> None:
    a = make_preset()
    b = copy.deepcopy(a)
    assert a == b
    assert a != a.replace(config=a.config.replace(precision="bf16"))


def test_the_config_must_make_the_tasks_global_batch() -> None:
    """micro_batch x grad_accum is the whole run's batch (DDP divides grad_accum by the
    process count), so it must equal task.global_batch."""
    data = preset_to_dict(make_preset())  # 8 x 4 = 32, task.global_batch 32
    data["config"]["grad_accum"] = 2
    assert problems_of(data) == [
        "config: micro_batch x grad_accum = 8 x 2 = 16 samples per step, but "
        "task.global_batch is 32; they must be equal"
    ]
    data["config"]["grad_accum"] = 4
    data["task"]["global_batch"] = 64
    assert problems_of(data) == [
        "config: micro_batch x grad_accum = 8 x 4 = 32 samples per step, but "
        "task.global_batch is 64; they must be equal"
    ]
