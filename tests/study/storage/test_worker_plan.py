"""``--devices`` and ``--cpu-workers``: which workers run where, and the inputs refused."""

from __future__ import annotations

import dataclasses
import os

import pytest

from autotune.core.errors import AutotuneError, UsageError
from autotune.machine.profile import GPUInfo, HardwareProfile
from autotune.study.storage.workers import WorkerSlot, plan_workers
from autotune.testing.burst import cpu_profile


def _gpus(*names: str) -> HardwareProfile:
    gpus = tuple(
        GPUInfo(
            index=i,
            name=name,
            total_memory_bytes=80 * 2**30,
            free_memory_bytes=None,
            compute_capability=(9, 0),
            sm_count=132,
            bf16_supported=True,
            tf32_supported=True,
            driver_version=None,
            cuda_version="12.4",
        )
        for i, name in enumerate(names)
    )
    return dataclasses.replace(cpu_profile(), gpus=gpus)


def test_all_gives_one_worker_per_gpu() -> None:
    slots = plan_workers("all", _gpus("H100", "H100"))
    assert slots == [WorkerSlot("cuda:0"), WorkerSlot("cuda:1")]
    assert plan_workers("cuda:1", _gpus("H100", "H100")) == [WorkerSlot("cuda:1")]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ("all", "no GPU.*--cpu-workers"),
        ("cpu", "one worker by default.*--cpu-workers"),
        ("cuda:0,cuda:0", "distinct devices"),
        ("", "distinct devices"),
    ],
)
def test_a_cpu_runs_one_worker_unless_told(devices: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        plan_workers(devices, cpu_profile())


def test_a_missing_gpu_or_mixed_models_are_refused() -> None:
    with pytest.raises(AutotuneError, match="cuda:3"):
        plan_workers("cuda:0,cuda:3", _gpus("H100", "H100"))
    with pytest.raises(UsageError, match="different GPU models"):
        plan_workers("all", _gpus("H100", "A100"))


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="Linux CPU affinity")
def test_cpu_workers_split_the_cores_and_never_exceed_them() -> None:
    cores = sorted(os.sched_getaffinity(0))
    slots = plan_workers("", cpu_profile(), cpu_workers=1)
    assert slots == [WorkerSlot("cpu", tuple(cores))]
    if len(cores) >= 2:
        two = plan_workers("cpu", cpu_profile(), cpu_workers=2)
        assert not set(two[0].cores) & set(two[1].cores)
    with pytest.raises(UsageError, match="--cpu-workers must be between 1 and"):
        plan_workers("", cpu_profile(), cpu_workers=len(cores) + 1)
    with pytest.raises(UsageError, match="--cpu-workers runs workers on the CPU"):
        plan_workers("cuda:0", cpu_profile(), cpu_workers=1)
