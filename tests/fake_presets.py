"""Presets, configs, fingerprints, GPUs and hardware profiles built by hand for the preset
tests (the real probe is not called)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from autotune.core.errors import PresetError
from autotune.machine.profile import CPUInfo, GPUInfo, HardwareProfile, SoftwareInfo
from autotune.preset import (
    Baseline,
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    SearchSummary,
    Task,
    TrainingDefaults,
    library,
    preset_from_dict,
)

GiB = 2**30
A100 = "NVIDIA A100-SXM4-80GB"
CPU_MODEL = "Intel(R) Xeon(R) CPU @ 2.20GHz"


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
    family: int | None = None,
    model_number: int | None = None,
) -> HardwareProfile:
    cpu = CPUInfo(
        model_name=cpu_model,
        physical_cores=cores,
        logical_cores=cores * 2,
        total_ram_bytes=16 * GiB,
        available_ram_bytes=available,
        isa_flags=isa,
        torch_threads=cores,
        family=family,
        model_number=model_number,
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


def wire_preset_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Empty shipped, working and user preset folders under ``tmp_path``, wired in (the
    working directory is changed to ``cwd``); ``user`` is created by whoever needs it."""
    places = {name: tmp_path / name for name in ("builtin", "cwd", "config")}
    for folder in places.values():
        folder.mkdir()
    monkeypatch.setattr(library, "builtin_preset_dir", lambda: places["builtin"])
    monkeypatch.chdir(places["cwd"])
    monkeypatch.setenv("AUTOTUNE_CONFIG_DIR", str(places["config"]))
    places["user"] = places["config"] / "presets"
    return places
