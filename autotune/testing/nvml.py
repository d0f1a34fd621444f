"""Fakes of ``pynvml`` and ``torch.cuda`` for probing GPUs on a machine without one.

``FakeGPU`` describes one card; ``FakeNVML`` answers the NVML calls ``autotune.machine.hardware``
makes (in NVML's order) and ``FakeCuda`` the torch.cuda ones (in torch's order, which may
differ: the probe must match them by UUID). A query named in ``FakeGPU.failing`` raises
``NVMLError_NotSupported``, as real NVML does for, e.g., power limits inside some VMs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

GiB = 2**30


@dataclass(frozen=True, kw_only=True)
class FakeGPU:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "8a3f0c1e-0000-0000-0000-000000000001"  # as torch prints it (NVML adds GPU-)
    total: int = 80 * GiB
    free: int = 79 * GiB
    cc: tuple[int, int] = (9, 0)
    sm_count: int = 132
    processes: tuple[tuple[int, int | None], ...] = ()  # (pid, used bytes or None)
    graphics_processes: tuple[tuple[int, int | None], ...] = ()
    utilization: int = 0  # % of the last sample period a kernel ran (nvidia-smi GPU-Util)
    power_mw: int = 700_000
    sm_clock: int = 1980
    mem_clock: int = 2619
    failing: frozenset[str] = frozenset()  # NVML function names that raise


@dataclass
class FakeNVML:
    """The subset of the ``pynvml`` module that the probe uses."""

    gpus: Sequence[FakeGPU]
    driver: str = "550.54.15"
    cuda_driver: int = 12040
    init_error: Exception | None = None
    count_error: Exception | None = None
    calls: list[str] = field(default_factory=list)

    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVMLError = pynvml.NVMLError

    def _gpu(self, name: str, handle: int) -> FakeGPU:
        self.calls.append(name)
        gpu = self.gpus[handle]
        if name in gpu.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda_driver

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise self.count_error
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index  # a handle is opaque; an int will do

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return "GPU-" + self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle)
        return SimpleNamespace(total=gpu.total, free=gpu.free, used=gpu.total - gpu.free)

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        return self._gpu("nvmlDeviceGetCudaComputeCapability", handle).cc

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        gpu = self._gpu("nvmlDeviceGetComputeRunningProcesses", handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        gpu = self._gpu("nvmlDeviceGetGraphicsRunningProcesses", handle)
        processes = gpu.graphics_processes
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in processes]

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: int) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_mw

    def nvmlDeviceGetMaxClockInfo(self, handle: int, clock: int) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxClockInfo", handle)
        return {pynvml.NVML_CLOCK_SM: gpu.sm_clock, pynvml.NVML_CLOCK_MEM: gpu.mem_clock}[clock]


@dataclass
class FakeCuda:
    """The subset of ``torch.cuda`` that the probe uses; ``gpus`` in torch's order."""

    gpus: Sequence[FakeGPU]
    available: bool = True

    def is_available(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return len(self.gpus) if self.available else 0

    def get_device_properties(self, index: int) -> SimpleNamespace:
        gpu = self.gpus[index]
        return SimpleNamespace(
            name=gpu.name,
            major=gpu.cc[0],
            minor=gpu.cc[1],
            total_memory=gpu.total,
            multi_processor_count=gpu.sm_count,
            uuid=gpu.uuid,
        )

    def mem_get_info(self, index: int) -> tuple[int, int]:
        gpu = self.gpus[index]
        return gpu.free, gpu.total


def no_gpu_stack() -> tuple[FakeNVML, FakeCuda]:
    """A machine without an NVIDIA driver: NVML's library is missing, torch sees nothing."""
    missing = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    return FakeNVML([], init_error=missing), FakeCuda([], available=False)


def gpu_stack(gpus: Iterable[FakeGPU], **nvml: Any) -> tuple[FakeNVML, FakeCuda]:
    """NVML and torch both see ``gpus`` (in the same order)."""
    gpus = list(gpus)
    return FakeNVML(gpus, **nvml), FakeCuda(gpus)
