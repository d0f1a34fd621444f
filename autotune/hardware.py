"""What this machine can do for training: GPUs (NVML, falling back to torch.cuda), the CPU,
and the software stack. ``probe()`` returns a typed ``HardwareProfile``; the search, the
burst runner and presets all use it.

The JSON form (``HardwareProfile.to_dict``) is a stable, documented schema (see README,
"autotune probe --json"): keys are only ever added, never renamed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "CPUInfo",
    "DeviceCaps",
    "GPUInfo",
    "GPUProcess",
    "HardwareProfile",
    "SoftwareInfo",
    "probe",
]

SCHEMA_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class GPUProcess:
    pid: int
    used_memory_bytes: int | None


@dataclass(frozen=True, kw_only=True)
class GPUInfo:
    index: int
    name: str
    total_memory_bytes: int
    free_memory_bytes: int | None
    compute_capability: tuple[int, int]
    sm_count: int | None
    bf16_supported: bool
    tf32_supported: bool
    driver_version: str | None
    cuda_version: str | None  # the CUDA version torch was built with
    processes: tuple[GPUProcess, ...] = ()
    power_limit_watts: float | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    source: Literal["nvml", "torch"] = "nvml"


@dataclass(frozen=True, kw_only=True)
class CPUInfo:
    model_name: str
    physical_cores: int | None
    logical_cores: int
    total_ram_bytes: int
    available_ram_bytes: int
    isa_flags: tuple[str, ...]  # the subset of avx2, avx512f, avx512_bf16, amx_bf16, amx_tile
    torch_threads: int

    @property
    def bf16_native(self) -> bool:
        """Whether the CPU has bf16 arithmetic units (otherwise bf16 is emulated, slowly)."""
        return "avx512_bf16" in self.isa_flags or "amx_bf16" in self.isa_flags


@dataclass(frozen=True, kw_only=True)
class SoftwareInfo:
    python_version: str
    torch_version: str
    torch_cuda_version: str | None  # None for a CPU build of torch
    compile_available: bool
    compile_reason: str  # why torch.compile can (not) work here
    optuna_version: str | None
    autotune_version: str


@dataclass(frozen=True, kw_only=True)
class DeviceCaps:
    """What one training device (``cpu`` or ``cuda:N``) supports, for validating configs."""

    device: str
    kind: Literal["cpu", "cuda"]
    name: str
    total_memory_bytes: int
    bf16: bool  # runs at all (CPU: always emulated or native; see bf16_native)
    bf16_native: bool  # has hardware units for it
    fp16: bool
    tf32: bool
    compile: bool
    peak_flops_bf16: float | None = None  # dense, for MFU; None where unknown
    peak_flops_fp32: float | None = None


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    gpus: tuple[GPUInfo, ...]
    cpu: CPUInfo
    software: SoftwareInfo
    notes: tuple[str, ...] = field(default=())  # e.g. "NVML failed: ...; used torch.cuda"

    @property
    def default_device(self) -> str:
        return "cuda:0" if self.gpus else "cpu"

    def device(self, name: str | None = None) -> DeviceCaps:
        """Capabilities of ``name`` (``cpu``, ``cuda``, ``cuda:N``); default: the best one."""
        raise NotImplementedError  # filled in by the probe implementation below

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["schema_version"] = SCHEMA_VERSION
        data["default_device"] = self.default_device
        return data


def probe() -> HardwareProfile:
    raise NotImplementedError
