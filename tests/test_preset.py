"""Presets: round trip, the validating boundary, migration, atomic saves, portability and
finding presets. Hardware profiles are built by hand (the real probe is not called).

``make_preset`` and ``make_profile`` are imported by the other preset test modules.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune import files
from autotune.burst import BurstResult
from autotune.config import TrainConfig
from autotune.errors import HardwareMismatchError, PresetError
from autotune.hardware import CPUInfo, GPUInfo, HardwareProfile, SoftwareInfo
from autotune.preset import (
    PRESET_SCHEMA_VERSION,
    Baseline,
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    SearchSummary,
    Task,
    TrainingDefaults,
    check_portability,
    dump_preset,
    find_presets,
    library,
    load_preset,
    preset_from_dict,
    preset_to_dict,
    resolve_preset,
    save_preset,
)

GiB = 2**30
A100 = "NVIDIA A100-SXM4-80GB"
CPU_MODEL = "Intel(R) Xeon(R) CPU @ 2.20GHz"


# -- factories ---------------------------------------------------------------------------


def make_config(**changes: Any) -> TrainConfig:
    return TrainConfig(**{"micro_batch": 8, "grad_accum": 4, "seq_len": 64, **changes})


def cpu_fingerprint(**changes: Any) -> Fingerprint:
    base: dict[str, Any] = dict(
        device_kind="cpu",
        device_name=CPU_MODEL,
        memory_bytes=16 * GiB,
        torch_version="2.13.0",
        autotune_version="0.1.0",
        cpu_model=CPU_MODEL,
        cpu_cores=2,
    )
    return Fingerprint(**{**base, **changes})


def gpu_fingerprint(name: str = A100, cc: str = "8.0", **changes: Any) -> Fingerprint:
    gpu: dict[str, Any] = dict(
        device_kind="cuda",
        device_name=name,
        memory_bytes=80 * GiB,
        compute_capability=cc,
        driver_version="550.54.15",
        cuda_version="12.4",
    )
    return cpu_fingerprint(**{**gpu, **changes})


def make_preset(**changes: Any) -> Preset:
    fields: dict[str, Any] = dict(
        name="mu-cpu",
        model=ModelRef(name="mu", args={"n_layer": 2, "dims": [64, 128]}),
        task=Task(seq_len=64, global_batch=32),
        config=make_config(knobs={"block_group": 2}),
        budget_bytes=8 * 10**9,
        fingerprint=cpu_fingerprint(),
        measured=Measured(
            tokens_per_s=12345.678901234567,
            samples_per_s=192.9012,
            step_time_median_s=0.1659,
            step_time_p90_s=0.17,
            peak_memory_bytes=2 * GiB,
            mfu=0.031,
            compile_s=None,
        ),
        baseline=Baseline(
            config=make_config(micro_batch=1, grad_accum=32),
            tokens_per_s=5000.0,
            samples_per_s=78.125,
            speedup=2.469,
        ),
        search=SearchSummary(
            trials_run=20,
            infeasible=3,
            pruned=4,
            failed=1,
            wall_s=512.25,
            study_name="mu-cpu",
            storage="sqlite:///autotune_runs/mu-cpu/study.db",
            objective="throughput",
            sampler="tpe",
        ),
        training=TrainingDefaults(lr=6e-4, max_steps=2000),
        created="2024-05-01T12:00:00Z",
        notes="measured on a quiet machine",
    )
    fields.update(changes)
    return Preset(**fields)


def make_gpu(
    *,
    index: int = 0,
    name: str = A100,
    cc: tuple[int, int] = (8, 0),
    total: int = 80 * GiB,
    free: int | None = 79 * GiB,
) -> GPUInfo:
    return GPUInfo(
        index=index,
        name=name,
        total_memory_bytes=total,
        free_memory_bytes=free,
        compute_capability=cc,
        sm_count=108,
        bf16_supported=cc >= (8, 0),
        tf32_supported=cc >= (8, 0),
        driver_version="550.54.15",
        cuda_version="12.4",
    )


def make_profile(
    *,
    gpus: tuple[GPUInfo, ...] = (),
    cpu_model: str = CPU_MODEL,
    cores: int = 2,
    available: int = 12 * GiB,
    isa: tuple[str, ...] = ("avx2",),
    torch_version: str = "2.13.0",
) -> HardwareProfile:
    cpu = CPUInfo(
        model_name=cpu_model,
        physical_cores=cores,
        logical_cores=cores * 2,
        total_ram_bytes=16 * GiB,
        available_ram_bytes=available,
        isa_flags=isa,
        torch_threads=cores,
    )
    software = SoftwareInfo(
        python_version="3.11.7",
        torch_version=torch_version,
        torch_cuda_version="12.4" if gpus else None,
        compile_available=True,
        compile_reason="ok",
        optuna_version="5.0",
        autotune_version="0.1.0",
    )
    return HardwareProfile(gpus=gpus, cpu=cpu, software=software)


def problems_of(data: Any) -> list[str]:
    with pytest.raises(PresetError) as info:
        preset_from_dict(data, source="test.yaml")
    return info.value.problems


# -- round trip ----------------------------------------------------------------------------


def test_save_then_load_gives_an_equal_preset(tmp_path: Path) -> None:
    preset = make_preset()
    path = save_preset(preset, tmp_path / "best.yaml")
    assert path == tmp_path / "best.yaml"
    loaded = load_preset(path)
    assert loaded == preset
    # Measured figures are kept verbatim, to the last bit.
    assert loaded.measured.tokens_per_s == 12345.678901234567
    assert loaded.model.args == {"n_layer": 2, "dims": [64, 128]}
    assert loaded.config.knobs == {"block_group": 2}


def test_dump_then_from_dict_gives_an_equal_preset() -> None:
    preset = make_preset(baseline=None, search=None, budget_bytes=None)
    text = dump_preset(preset)
    assert text.startswith("# autotune preset, schema version 2")
    assert preset_from_dict(yaml.safe_load(text)) == preset
    assert preset_from_dict(preset_to_dict(preset)) == preset


def test_to_dict_has_a_stable_key_order() -> None:
    data = preset_to_dict(make_preset())
    assert list(data) == [
        "schema_version",
        "name",
        "created",
        "model",
        "task",
        "budget_bytes",
        "config",
        "measured",
        "baseline",
        "search",
        "fingerprint",
        "training",
        "notes",
    ]
    assert data["schema_version"] == PRESET_SCHEMA_VERSION
    assert list(data["measured"])[:2] == ["tokens_per_s", "samples_per_s"]
    # Plain data only: yaml.safe_dump accepts it.
    yaml.safe_dump(data)


def test_header_comment_cannot_inject_yaml() -> None:
    preset = make_preset(name="evil\nschema_version: 3\r\u2028x")
    text = dump_preset(preset)
    assert preset_from_dict(yaml.safe_load(text)).name == preset.name
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert len(header) == 4


def test_created_accepts_yaml_timestamps_and_normalises_to_utc() -> None:
    data = yaml.safe_load(dump_preset(make_preset()).replace("'2024-05-01T12:00:00Z'", "x"))
    data["created"] = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    data["created"] = "2024-05-01T12:00:00+00:00"
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    unquoted = "created: 2024-05-01T12:00:00Z\n"  # YAML reads it as a datetime
    data["created"] = yaml.safe_load(unquoted)["created"]
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    data["created"] = "2024-05-01T12:00:00+02:00"
    assert any(p.startswith("created: expected an ISO 8601 UTC") for p in problems_of(data))


# -- the boundary --------------------------------------------------------------------------


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
    assert "task.global_batch: expected a number > 0; got 0" in message
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
        ("task.seq_len", True, "task.seq_len: expected an integer; got True"),
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


# -- migration -----------------------------------------------------------------------------


def v1_preset() -> dict[str, Any]:
    config = make_config(precision="bf16").to_dict()
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
    assert "seq_len: expected a number > 0; got 0" in problems
    assert "search.trials: expected an integer; got None" in problems
    assert "model: missing required field" in problems


# -- files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"  \n\n# only a comment\n", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
        (b"name: caf\xe9\n", "is not UTF-8 text"),
        (b"name: [unclosed\n", "is not valid YAML"),
        (b"a: 1\n  b: 2\n", "is not valid YAML"),
        (b"!!python/object/apply:os.system ['true']\n", "YAML tag that autotune does not load"),
        (b"schema_version: !!python/name:os.system\n", "tags such as !!python/object"),
        (b"- 1\n- 2\n", "expected a mapping of fields at the top level, got a list"),
        (b"just text\n", "expected a mapping of fields at the top level, got a string"),
        (b"schema_version: 2\n", "task: missing required field"),
    ],
)
def test_unreadable_files_give_a_preset_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(PresetError) as info:
        load_preset(path)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def test_a_python_tag_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f"schema_version: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(PresetError):
        load_preset(path)
    assert not marker.exists()


@pytest.mark.parametrize("target", ["model.args", "config.micro_batch", "config.knobs", "name"])
def test_a_billion_laughs_is_refused_quickly(tmp_path: Path, target: str) -> None:
    """Nested YAML aliases: 9**10 values if expanded; validation must not expand them."""
    laughs = {"l0": ["x"] * 9}
    for i in range(1, 10):
        laughs[f"l{i}"] = [laughs[f"l{i - 1}"]] * 9
    data = preset_to_dict(make_preset())
    section, _, leaf = target.rpartition(".")
    parent = data[section] if section else data
    parent[leaf] = {"deep": laughs["l9"]} if leaf == "knobs" else laughs["l9"]
    path = tmp_path / "laughs.yaml"
    path.write_text(yaml.safe_dump(data))  # anchors and aliases, so the file stays small
    assert path.stat().st_size < 10_000
    with pytest.raises(PresetError) as info:
        load_preset(path)
    assert len(str(info.value)) < 1000 and target in str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(PresetError, match="does not exist"):
        load_preset(tmp_path / "nope.yaml")
    with pytest.raises(PresetError, match="is a directory"):
        load_preset(tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_preset(make_preset(), tmp_path / "p.yaml")

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "read_bytes", denied)  # chmod 0 does not stop root
    with pytest.raises(PresetError, match=r"cannot read preset file .*: Permission denied"):
        load_preset(path)


def test_save_preset_overwrite_flag(tmp_path: Path) -> None:
    path = save_preset(make_preset(), tmp_path / "sub" / "p.yaml")  # makes the folder
    before = path.read_text()
    with pytest.raises(PresetError, match="already exists"):
        save_preset(make_preset(name="other"), path, overwrite=False)
    assert path.read_text() == before
    save_preset(make_preset(name="other"), path)
    assert load_preset(path).name == "other"
    with pytest.raises(PresetError, match="is a directory"):
        save_preset(make_preset(), tmp_path)


def test_no_clobber_save_without_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: Any, dst: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "link", no_links)
    path = save_preset(make_preset(), tmp_path / "p.yaml", overwrite=False)
    assert load_preset(path) == make_preset()
    with pytest.raises(PresetError, match="already exists"):
        save_preset(make_preset(name="new"), path, overwrite=False)
    assert load_preset(path).name == "mu-cpu"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_failing_dump_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def broken_dump(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(yaml, "safe_dump", broken_dump)
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


def test_a_failing_replace_leaves_the_old_file_intact_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(PresetError, match=r"cannot write preset .* No space left on device"):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


def test_an_interrupted_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


# -- portability ---------------------------------------------------------------------------


def test_same_gpu_model_is_fine() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="bf16"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert report.same_device and not report.measured_elsewhere
    assert report.device == "cuda:0" and report.device_name == A100
    assert report.warnings == []
    assert report.differences == []


def test_same_gpu_with_other_software_lists_the_differences() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(torch_version="2.4.0", driver_version="1"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert report.same_device and not report.measured_elsewhere
    assert "torch_version: preset 2.4.0 vs here 2.13.0" in report.differences
    assert "driver_version: preset 1 vs here 550.54.15" in report.differences
    assert any("torch 2.4.0" in w for w in report.warnings)


def test_a_different_gpu_is_a_warning_and_measured_elsewhere() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(name="NVIDIA H100 80GB HBM3", cc="9.0"))
    report = check_portability(preset, make_profile(gpus=(make_gpu(),)))
    assert not report.same_device and report.measured_elsewhere
    assert "device_name: preset NVIDIA H100 80GB HBM3 vs here " + A100 in report.differences
    assert "compute_capability: preset 9.0 vs here 8.0" in report.differences
    assert any("measured elsewhere" in w for w in report.warnings)


def test_a_different_cpu_is_a_warning_and_measured_elsewhere() -> None:
    preset = make_preset()
    here = make_profile(cpu_model="AMD EPYC 7B12", cores=8)
    report = check_portability(preset, here)
    assert report.measured_elsewhere and report.device == "cpu"
    assert f"cpu_model: preset {CPU_MODEL} vs here AMD EPYC 7B12" in report.differences
    same = check_portability(preset, make_profile())
    assert same.same_device and same.warnings == []


def test_bf16_on_a_pre_ampere_gpu_is_refused_with_fp16_as_the_fallback() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="bf16"))
    v100 = make_profile(gpus=(make_gpu(name="Tesla V100-SXM2-16GB", cc=(7, 0), total=16 * GiB),))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, v100)
    message = str(info.value)
    assert "bf16" in message and "Tesla V100-SXM2-16GB is 7.0" in message
    assert "use fp16 instead" in message and "config.precision: fp16" in message
    assert info.value.exit_code == 2
    # force does not make bf16 run on a V100
    with pytest.raises(HardwareMismatchError):
        check_portability(preset, v100, force=True)


def test_tf32_on_a_pre_ampere_gpu_is_refused_with_fp32() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="tf32"))
    t4 = make_profile(gpus=(make_gpu(name="Tesla T4", cc=(7, 5), total=16 * GiB),))
    with pytest.raises(HardwareMismatchError, match=r"tf32 .* use fp32"):
        check_portability(preset, t4)


@pytest.mark.parametrize("precision", ["fp16", "tf32"])
def test_fp16_or_tf32_on_a_cpu_is_refused(precision: str) -> None:
    preset = make_preset(config=make_config(precision=precision))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, make_profile())
    message = str(info.value)
    assert f"config.precision {precision} needs a CUDA GPU" in message
    assert "use fp32" in message
    with pytest.raises(HardwareMismatchError, match=r"use fp32 or bf16 .*native bf16"):
        check_portability(preset, make_profile(isa=("avx2", "avx512_bf16")))


def test_a_gpu_preset_on_a_machine_without_gpu_checks_the_cpu() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), config=make_config(precision="fp16"))
    with pytest.raises(HardwareMismatchError, match="fp16 needs a CUDA GPU"):
        check_portability(preset, make_profile())
    fp32 = make_preset(fingerprint=gpu_fingerprint())
    report = check_portability(fp32, make_profile())
    assert report.device == "cpu" and report.measured_elsewhere
    assert "device_kind: preset cuda vs here cpu" in report.differences


def test_bf16_on_a_cpu_without_bf16_units_is_a_warning() -> None:
    preset = make_preset(config=make_config(precision="bf16"))
    report = check_portability(preset, make_profile())
    assert any("emulated" in w for w in report.warnings)
    native = check_portability(preset, make_profile(isa=("amx_bf16",)))
    assert not any("emulated" in w for w in native.warnings)


def test_peak_memory_above_free_gpu_memory_is_refused_unless_forced() -> None:
    measured = Measured(tokens_per_s=1.0, peak_memory_bytes=30 * GiB)
    preset = make_preset(fingerprint=gpu_fingerprint(), measured=measured)
    busy = make_profile(gpus=(make_gpu(free=20 * GiB),))
    with pytest.raises(HardwareMismatchError) as info:
        check_portability(preset, busy)
    assert "peak memory 30.00 GiB exceeds the 20.00 GiB of free GPU memory" in str(info.value)
    assert "--force" in str(info.value)
    report = check_portability(preset, busy, force=True)
    assert any("forced" in w and "30.00 GiB" in w for w in report.warnings)
    assert check_portability(preset, make_profile(gpus=(make_gpu(free=31 * GiB),))).warnings == []


def test_peak_memory_above_available_ram_is_refused_on_cpu() -> None:
    preset = make_preset(measured=Measured(samples_per_s=5.0, peak_memory_bytes=13 * GiB))
    with pytest.raises(HardwareMismatchError, match="of available RAM on this machine"):
        check_portability(preset, make_profile(available=12 * GiB))
    report = check_portability(preset, make_profile(available=12 * GiB), force=True)
    assert report.same_device and len(report.warnings) == 1


def test_unknown_free_memory_and_unknown_peak_are_warnings() -> None:
    preset = make_preset(fingerprint=gpu_fingerprint(), measured=Measured(tokens_per_s=1.0))
    report = check_portability(preset, make_profile(gpus=(make_gpu(free=None),)))
    assert any("records no peak memory" in w for w in report.warnings)
    preset = make_preset(fingerprint=gpu_fingerprint())
    report = check_portability(preset, make_profile(gpus=(make_gpu(free=None),)))
    assert any("free memory of cuda:0" in w for w in report.warnings)


def test_an_explicit_device_is_checked() -> None:
    profile = make_profile(gpus=(make_gpu(index=0), make_gpu(index=1, name="Tesla T4", cc=(7, 5))))
    preset = make_preset(fingerprint=gpu_fingerprint())
    assert check_portability(preset, profile, "cuda:1").device_name == "Tesla T4"
    assert check_portability(preset, profile, "cpu").device == "cpu"
    with pytest.raises(HardwareMismatchError, match="does not exist here"):
        check_portability(preset, profile, "cuda:7")


# -- finding presets -----------------------------------------------------------------------


@pytest.fixture
def preset_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty shipped, working and user folders, wired in."""
    places = {name: tmp_path / name for name in ("builtin", "cwd", "config")}
    for folder in places.values():
        folder.mkdir()
    monkeypatch.setattr(library, "builtin_preset_dir", lambda: places["builtin"])
    monkeypatch.chdir(places["cwd"])
    monkeypatch.setenv("AUTOTUNE_CONFIG_DIR", str(places["config"]))
    places["user"] = places["config"] / "presets"
    return places


def test_find_presets_looks_in_all_three_places(preset_places: dict[str, Path]) -> None:
    builtin = save_preset(make_preset(name="shipped"), preset_places["builtin"] / "cpu/mu.yaml")
    cwd = save_preset(make_preset(name="here"), preset_places["cwd"] / "best.yaml")
    (preset_places["cwd"] / "compose.yaml").write_text("services: {}\n")  # not a preset
    (preset_places["cwd"] / "broken.yaml").write_text("a: [\n")
    user = save_preset(make_preset(name="mine"), preset_places["user"] / "team/gpt.yaml")
    assert find_presets() == [("builtin", builtin), ("cwd", cwd), ("user", user)]


def test_resolve_preset_by_path_name_or_name_field(preset_places: dict[str, Path]) -> None:
    shipped = save_preset(make_preset(name="Shipped MU"), preset_places["builtin"] / "cpu/mu.yaml")
    user = save_preset(make_preset(name="mine"), preset_places["user"] / "gpt.yaml")
    cwd = save_preset(make_preset(name="here"), preset_places["cwd"] / "best.yaml")
    assert resolve_preset(str(shipped)) == shipped
    assert resolve_preset("cpu/mu") == shipped
    assert resolve_preset("mu") == shipped
    assert resolve_preset("gpt.yaml") == user
    assert resolve_preset("best") == cwd
    assert resolve_preset("Shipped MU") == shipped
    with pytest.raises(PresetError) as info:
        resolve_preset("gtp")
    message = str(info.value)
    assert "no preset 'gtp' (did you mean 'gpt'?)" in message
    assert "cpu/mu (builtin)" in message and "gpt (user)" in message
    with pytest.raises(PresetError, match=r"no preset file 'missing/best\.yaml'"):
        resolve_preset("missing/best.yaml")


def test_a_working_directory_preset_wins_over_a_shipped_one(
    preset_places: dict[str, Path],
) -> None:
    save_preset(make_preset(), preset_places["builtin"] / "mu.yaml")
    mine = save_preset(make_preset(), preset_places["user"] / "mu.yaml")
    assert resolve_preset("mu") == mine


def test_an_ambiguous_short_name_is_refused(preset_places: dict[str, Path]) -> None:
    save_preset(make_preset(), preset_places["builtin"] / "cpu" / "mu.yaml")
    save_preset(make_preset(), preset_places["builtin"] / "h100" / "mu.yaml")
    with pytest.raises(PresetError, match=r"'mu' is ambiguous: cpu/mu \(builtin\), h100/mu"):
        resolve_preset("mu")
    assert resolve_preset("h100/mu") == preset_places["builtin"] / "h100" / "mu.yaml"


def test_the_shipped_folder_is_found_in_a_source_checkout() -> None:
    folder = library.builtin_preset_dir()
    assert folder is not None and folder.is_dir()
    assert folder.name == "presets"


def test_user_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AUTOTUNE_CONFIG_DIR", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert library.user_preset_dir() == tmp_path / "autotune" / "presets"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert library.user_preset_dir() == Path.home() / ".config" / "autotune" / "presets"


def test_presets_are_compared_by_value() -> None:
    a = make_preset()
    b = copy.deepcopy(a)
    assert a == b
    assert a != a.replace(config=a.config.replace(precision="bf16"))


# -- the format reference ------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "preset-format.md"


def yaml_blocks() -> list[str]:
    text = DOCS.read_text()
    return [block.split("```", 1)[0] for block in text.split("```yaml\n")[1:]]


def test_the_documented_example_is_what_autotune_writes() -> None:
    *_, example = yaml_blocks()
    preset = preset_from_dict(yaml.safe_load(example), source="docs example")
    assert dump_preset(preset) == example
    documented = DOCS.read_text()
    for section, cls in [
        ("Top level", Preset),
        ("model", ModelRef),
        ("task", Task),
        ("config", TrainConfig),
        ("measured", Measured),
        ("baseline", Baseline),
        ("search", SearchSummary),
        ("fingerprint", Fingerprint),
        ("training", TrainingDefaults),
    ]:
        header = "### Top level" if cls is Preset else f"### `{section}`"
        part = documented.split(header, 1)[1].split("\n### ", 1)[0]
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in part, f"{section}.{f.name} is not documented"


def test_the_documented_version_1_file_migrates() -> None:
    v1 = next(block for block in yaml_blocks() if block.startswith("schema_version: 1"))
    preset = preset_from_dict(yaml.safe_load(v1), source="docs v1 example")
    assert preset.budget_bytes == 8 * 10**9 and preset.measured.step_time_median_s == 0.455
