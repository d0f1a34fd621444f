"""What a machine is, as a record: its GPUs, its CPU and its software stack
(``HardwareProfile``), and the stable JSON form of it.

The JSON form (``HardwareProfile.to_dict``) is a stable, documented schema (docs/probe.md,
"autotune probe --json schema"): keys are only ever added, never renamed. ``probe()``
(``autotune.machine.hardware``) measures one; ``from_dict`` reads one back (a preset's
fingerprint).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.core.device_caps import DeviceCaps, parse_device, peak_flops
from autotune.core.errors import HardwareMismatchError, UsageError
from autotune.core.plain import from_plain, to_plain

__all__ = [
    "CPUInfo",
    "GPUInfo",
    "GPUProcess",
    "HardwareProfile",
    "ISA_FLAGS",
    "SCHEMA_VERSION",
    "SoftwareInfo",
    "cpu_generation",
]

SCHEMA_VERSION = 1

# The CPU flags (as /proc/cpuinfo spells them) that change training speed on a CPU.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


@dataclass(frozen=True, kw_only=True)
class GPUProcess:
    pid: int
    used_memory_bytes: int | None  # None where NVML cannot say (e.g. inside a container)
    name: str | None = None  # None where the process is not visible from here


@dataclass(frozen=True, kw_only=True)
class GPUInfo:
    index: int  # torch's index: this GPU is ``cuda:{index}``
    name: str
    total_memory_bytes: int
    free_memory_bytes: int | None
    compute_capability: tuple[int, int]
    sm_count: int | None
    bf16_supported: bool
    tf32_supported: bool
    driver_version: str | None
    cuda_version: str | None  # the CUDA version torch was built with
    processes: tuple[GPUProcess, ...] | None = ()  # None: unknown (no NVML)
    power_limit_watts: float | None = None
    max_sm_clock_mhz: int | None = None
    max_memory_clock_mhz: int | None = None
    source: Literal["nvml", "torch"] = "nvml"
    uuid: str | None = None
    driver_cuda_version: str | None = None  # the newest CUDA the driver supports


def cpu_generation(family: int | None, model_number: int | None) -> str:
    """x86's CPU family and model numbers in words, ``"family 26, model 2"``; "" where
    the family is unknown."""
    if family is None:
        return ""
    return f"family {family}" + (f", model {model_number}" if model_number is not None else "")


@dataclass(frozen=True, kw_only=True)
class CPUInfo:
    model_name: str
    physical_cores: int | None
    logical_cores: int
    total_ram_bytes: int
    available_ram_bytes: int
    isa_flags: tuple[str, ...]  # the subset of avx2, avx512f, avx512_bf16, amx_bf16, amx_tile
    torch_threads: int
    # x86's CPU family and model numbers (``/proc/cpuinfo``); None elsewhere. A VM often
    # names only the brand ("AMD EPYC"), where these tell one generation from another.
    family: int | None = None
    model_number: int | None = None

    @property
    def generation(self) -> str:
        """``"family 26, model 2"``, or "" where unknown."""
        return cpu_generation(self.family, self.model_number)

    @property
    def described(self) -> str:
        """The model name with its generation where known: ``"AMD EPYC (family 26, model
        2)"``, as ``autotune probe`` and the benchmarks' headers name the CPU."""
        return f"{self.model_name} ({self.generation})" if self.generation else self.model_name

    @property
    def bf16_native(self) -> bool:
        """Whether the CPU has bf16 arithmetic units (otherwise bf16 is emulated, slowly)."""
        return "avx512_bf16" in self.isa_flags or "amx_bf16" in self.isa_flags


@dataclass(frozen=True, kw_only=True)
class SoftwareInfo:
    python_version: str
    torch_version: str
    torch_cuda_version: str | None  # None for a CPU build of torch
    compile_available: bool  # torch.compile on the default device (cuda:0, else the CPU)
    compile_reason: str  # why torch.compile can (not) work here
    optuna_version: str | None
    autotune_version: str
    compile_cpu_available: bool = False  # torch.compile's C++ backend, for device "cpu"
    compile_cpu_reason: str = ""
    platform: str = ""  # e.g. Linux-6.8.0-x86_64-with-glibc2.36


@dataclass(frozen=True, kw_only=True)
class HardwareProfile:
    gpus: tuple[GPUInfo, ...]
    cpu: CPUInfo
    software: SoftwareInfo
    notes: tuple[str, ...] = field(default=())  # e.g. "NVML failed: ...; used torch.cuda"

    @property
    def default_device(self) -> str:
        return "cuda:0" if self.gpus else "cpu"

    @property
    def devices(self) -> tuple[str, ...]:
        """Every device name ``device()`` accepts in its canonical form."""
        return ("cpu", *(f"cuda:{gpu.index}" for gpu in self.gpus))

    def device(self, name: str | None = None) -> DeviceCaps:
        """Capabilities of ``name`` (``cpu``, ``cuda``, ``cuda:N``); default: the best one.

        Raises as ``resolve_device`` does.
        """
        _, gpu = self.resolve_device(name)
        return self._cpu_caps() if gpu is None else self._cuda_caps(gpu)

    def resolve_device(self, name: str | None = None) -> tuple[str, GPUInfo | None]:
        """``name`` (``cpu``, ``cuda``, ``cuda:N``; default: the best device) in canonical
        form (``cpu``, ``cuda:N``) and its GPU (None for the CPU).

        Raises ``HardwareMismatchError`` for a GPU this machine does not have and
        ``UsageError`` for a name that is not a device at all; both list what exists.
        """
        requested = self.default_device if name is None else name
        try:
            kind, index = parse_device(requested)
        except UsageError as exc:
            raise UsageError(f"{exc}; this machine has {self._describe_devices()}") from None
        if kind == "cpu":
            return "cpu", None
        if not self.gpus:
            raise HardwareMismatchError(
                f"device {requested!r} does not exist here: torch sees no NVIDIA GPU, so the "
                f"only device is cpu{self._gpu_hint()}"
            )
        index = index or 0
        for gpu in self.gpus:
            if gpu.index == index:
                return f"cuda:{index}", gpu
        raise HardwareMismatchError(
            f"device {requested!r} does not exist here: this machine has no GPU cuda:{index}, "
            f"only {self._describe_devices()}"
        )

    def _describe_devices(self) -> str:
        gpus = [f"cuda:{gpu.index} ({gpu.name})" for gpu in self.gpus]
        return ", ".join(["cpu", *gpus])

    def _gpu_hint(self) -> str:
        hints = [note for note in self.notes if "NVML sees" in note]
        return f" ({hints[0]})" if hints else ""

    def _cpu_caps(self) -> DeviceCaps:
        return DeviceCaps(
            device="cpu",
            kind="cpu",
            name=self.cpu.model_name,
            total_memory_bytes=self.cpu.total_ram_bytes,
            bf16=True,  # torch runs bf16 on any CPU; bf16_native says whether it is fast
            bf16_native=self.cpu.bf16_native,
            fp16=False,
            tf32=False,
            compile=self.software.compile_cpu_available,
            compile_problem=(
                "" if self.software.compile_cpu_available else self.software.compile_cpu_reason
            ),
        )

    def _cuda_caps(self, gpu: GPUInfo) -> DeviceCaps:
        peaks = peak_flops(gpu.name)
        return DeviceCaps(
            device=f"cuda:{gpu.index}",
            kind="cuda",
            name=gpu.name,
            total_memory_bytes=gpu.total_memory_bytes,
            bf16=gpu.bf16_supported,
            bf16_native=gpu.bf16_supported,
            fp16=True,
            tf32=gpu.tf32_supported,
            # Triton (Inductor's GPU backend) needs compute capability 7.0 or newer.
            compile=self.software.compile_available and gpu.compute_capability >= (7, 0),
            compile_problem=self._cuda_compile_problem(gpu),
            peak_flops_bf16=peaks["bf16"],
            peak_flops_fp32=peaks["fp32"],
            peak_flops_tf32=peaks["tf32"],
            compute_capability=gpu.compute_capability,
        )

    def _cuda_compile_problem(self, gpu: GPUInfo) -> str:
        """Why torch.compile cannot run on ``gpu`` ("" where it can)."""
        if not self.software.compile_available:
            return self.software.compile_reason
        if gpu.compute_capability < (7, 0):
            return "Triton needs compute capability 7.0 or newer"
        return ""

    def to_dict(self) -> dict[str, Any]:
        """The ``autotune probe --json`` schema (version ``SCHEMA_VERSION``); plain JSON/YAML
        types only (tuples become lists). Keys are only ever added, never renamed.

        - ``schema_version`` int; ``default_device`` ``"cuda:0"`` or ``"cpu"`` (derived)
        - ``gpus``: list, one per GPU torch can use, each with ``index`` (the N of
          ``cuda:N``), ``name``, ``uuid``, ``total_memory_bytes``, ``free_memory_bytes``,
          ``compute_capability`` ``[major, minor]``, ``sm_count``, ``bf16_supported``,
          ``tf32_supported``, ``driver_version``, ``driver_cuda_version`` (newest CUDA the
          driver supports), ``cuda_version`` (torch's build), ``processes`` (list of
          ``{pid, used_memory_bytes, name}``; ``null`` = unknown), ``power_limit_watts``,
          ``max_sm_clock_mhz``, ``max_memory_clock_mhz``, ``source`` (``"nvml"`` or
          ``"torch"``), and derived ``peak_flops_bf16``, ``peak_flops_tf32``,
          ``peak_flops_fp32`` (dense datasheet figures, ``null`` where unknown)
        - ``cpu``: ``model_name``, ``physical_cores``, ``logical_cores``,
          ``total_ram_bytes``, ``available_ram_bytes``, ``isa_flags`` (list, subset of
          avx2, avx512f, avx512_bf16, amx_bf16, amx_tile), ``torch_threads``, ``family``
          and ``model_number`` (x86's CPU family and model, ``null`` elsewhere), derived
          ``bf16_native``
        - ``software``: ``python_version``, ``platform``, ``torch_version``,
          ``torch_cuda_version`` (``null`` = CPU build), ``compile_available`` and
          ``compile_reason`` (for the default device), ``compile_cpu_available`` and
          ``compile_cpu_reason``, ``optuna_version`` (``null`` = not installed),
          ``autotune_version``
        - ``notes``: list of strings (why a fallback was used, GPUs torch cannot use)

        Any value that could not be measured is ``null``. ``from_dict`` reads this back.
        """
        data: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "default_device": self.default_device,
        }
        data.update(to_plain(self))
        for gpu_dict, gpu in zip(data["gpus"], self.gpus, strict=True):
            peaks = peak_flops(gpu.name)
            gpu_dict.update({f"peak_flops_{kind}": value for kind, value in peaks.items()})
        data["cpu"]["bf16_native"] = self.cpu.bf16_native
        return data

    @classmethod
    def from_dict(cls, data: Any, *, path: str = "hardware") -> HardwareProfile:
        """Rebuild a profile from ``to_dict`` output (e.g. a preset's fingerprint).

        Derived and unknown keys are ignored, so a profile written by a newer autotune
        still loads; a missing or mistyped field raises ``ConfigError`` naming its path.
        """
        return from_plain(cls, data, path=path, context="invalid hardware profile")
