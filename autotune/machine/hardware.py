"""What this machine can do for training: GPUs (NVML, falling back to torch.cuda), the CPU,
and the software stack. ``probe()`` returns a typed ``HardwareProfile``; the search, the
burst runner and presets all use it.

The JSON form (``HardwareProfile.to_dict``) is a stable, documented schema (see README,
"autotune probe --json"): keys are only ever added, never renamed.

GPU indices are torch's (``cuda:N``, after ``CUDA_VISIBLE_DEVICES``); NVML's handles are
matched to them by UUID, never by position. Probing a GPU through torch initialises the
CUDA runtime in this process but allocates nothing on the device, except in the torch
fallback, where reading free memory (``torch.cuda.mem_get_info``) creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.metadata
import os
import platform
import re
import shutil
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

from autotune.config.train_config import PRECISIONS
from autotune.core.errors import ConfigError, HardwareMismatchError, UsageError
from autotune.core.schema import BAD, build

__all__ = [
    "CPUInfo",
    "DeviceCaps",
    "GPUInfo",
    "GPUProcess",
    "HardwareProfile",
    "SCHEMA_VERSION",
    "SoftwareInfo",
    "parse_device",
    "peak_flops",
    "probe",
]

SCHEMA_VERSION = 1

# The CPU flags (as /proc/cpuinfo spells them) that change training speed on a CPU.
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")

T = TypeVar("T")


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
    compile_available: bool  # torch.compile on the default device (cuda:0, else the CPU)
    compile_reason: str  # why torch.compile can (not) work here
    optuna_version: str | None
    autotune_version: str
    compile_cpu_available: bool = False  # torch.compile's C++ backend, for device "cpu"
    compile_cpu_reason: str = ""
    platform: str = ""  # e.g. Linux-6.8.0-x86_64-with-glibc2.36


@dataclass(frozen=True, kw_only=True)
class DeviceCaps:
    """What one training device (``cpu`` or ``cuda:N``) supports, for validating configs.

    It owns two rules every caller uses: which precisions the device runs
    (``precisions``, ``precision_problem``, ``precision_warning``) and its dense peak
    FLOP/s (``peak_flops``).
    """

    device: str
    kind: Literal["cpu", "cuda"]
    name: str
    total_memory_bytes: int
    bf16: bool  # runs at all (CPU: always emulated or native; see bf16_native)
    bf16_native: bool  # has hardware units for it
    fp16: bool  # a GradScaler-backed fp16 step; only ever on CUDA
    tf32: bool
    compile: bool
    peak_flops_bf16: float | None = None  # dense, for MFU; None where unknown
    peak_flops_fp32: float | None = None  # plain FP32 (no tensor cores)
    peak_flops_tf32: float | None = None  # dense TF32 tensor cores
    compute_capability: tuple[int, int] | None = None  # CUDA only; None where unknown

    def peak_flops(self, precision: str) -> float | None:
        """Dense peak FLOP/s for a ``TrainConfig.precision`` (fp16 counts as bf16)."""
        _check_precision(precision)
        if precision in ("bf16", "fp16"):
            return self.peak_flops_bf16
        if precision == "tf32":
            return self.peak_flops_tf32
        return self.peak_flops_fp32

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this device runs, in ``PRECISIONS`` order (fp32 always)."""
        return tuple(precision for precision in PRECISIONS if self._runs(precision))

    def precision_problem(self, precision: str) -> str | None:
        """Why this device cannot run ``precision`` and what to use instead; None if it can.

        fp16 needs CUDA (a GradScaler-backed step); bf16 and tf32 need compute capability
        8.0 on a GPU; a CPU runs fp32 and bf16 (see ``precision_warning``).
        """
        if self._runs(precision):
            return None
        if self.kind != "cuda":
            need = f"{precision} needs a CUDA device, not the CPU"
        elif precision in ("bf16", "tf32") and self.compute_capability is not None:
            cc = "{}.{}".format(*self.compute_capability)
            need = f"{precision} needs compute capability 8.0 or newer and {self.name} is {cc}"
        elif precision in ("bf16", "tf32"):
            need = f"{precision} needs compute capability 8.0 or newer, which {self.name} lacks"
        else:
            need = f"{self.device} ({self.name}) cannot run {precision}"
        return f"{need}; use {self._instead(precision)}"

    def precision_warning(self, precision: str) -> str | None:
        """Why ``precision`` runs here but slowly (bf16 emulated on a CPU); None if it does not."""
        _check_precision(precision)
        if precision == "bf16" and self.kind == "cpu" and self.bf16 and not self.bf16_native:
            return (
                "this CPU has no bf16 units (no avx512_bf16/amx_bf16), so bf16 is emulated and "
                "likely much slower than fp32"
            )
        return None

    def fallback_precision(self, precision: str) -> str:
        """What to run where ``precision`` cannot run: fp16 for bf16 on a GPU (the same
        memory, with a loss scaler), else fp32; ``precision`` itself where it runs."""
        if self._runs(precision):
            return precision
        if precision == "bf16" and self._runs("fp16"):
            return "fp16"
        return "fp32"

    def _runs(self, precision: str) -> bool:
        _check_precision(precision)
        if precision == "fp16":
            return self.kind == "cuda" and self.fp16
        if precision == "bf16":
            return self.bf16
        if precision == "tf32":
            return self.tf32
        return True

    def _instead(self, precision: str) -> str:
        """The advice after a refusal: the fallback, and a faster choice where one runs."""
        if self.fallback_precision(precision) == "fp16":
            return "fp16 instead (same memory, with a loss scaler)"
        if self.kind != "cuda" and self.bf16:
            if self.bf16_native:
                return "fp32 or bf16 (this CPU has native bf16)"
            return "fp32 (bf16 also runs, but this CPU emulates it slowly)"
        faster = [p for p in ("bf16", "fp16") if self._runs(p)]
        return f"fp32 (or {faster[0]} for speed)" if faster else "fp32"


def _check_precision(precision: str) -> None:
    if precision not in PRECISIONS:
        raise UsageError(f"unknown precision {precision!r}; expected fp32, tf32, bf16 or fp16")


_CUDA_NAME = re.compile(r"cuda(?::(\d+))?")


def parse_device(name: str) -> tuple[Literal["cpu", "cuda"], int | None]:
    """``"cpu"`` -> ("cpu", None), ``"cuda"`` -> ("cuda", None), ``" CUDA:1"`` ->
    ("cuda", 1). Raises ``UsageError`` for a name that is not a device at all."""
    text = name.strip().lower()
    if text == "cpu":
        return "cpu", None
    match = _CUDA_NAME.fullmatch(text)
    if match is None:
        raise UsageError(f"unknown device {name!r}: expected cpu, cuda or cuda:N")
    return "cuda", int(match[1]) if match[1] is not None else None


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
            peak_flops_bf16=peaks["bf16"],
            peak_flops_fp32=peaks["fp32"],
            peak_flops_tf32=peaks["tf32"],
            compute_capability=gpu.compute_capability,
        )

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
          avx2, avx512f, avx512_bf16, amx_bf16, amx_tile), ``torch_threads``, derived
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
        data.update(_plain(dataclasses.asdict(self)))
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
        problems: list[str] = []
        profile = build(cls, data, path, problems, ignore_unknown=True)
        if problems or profile is BAD:
            raise ConfigError(problems, context="invalid hardware profile")
        return cast(HardwareProfile, profile)


# Dense (no sparsity) peak FLOP/s from the vendors' datasheets: NVIDIA H100 (SXM5 and
# PCIe), H200 (SXM), A100, L4, A10, GeForce RTX 4090 (Ada whitepaper, FP32 accumulate),
# V100. First match wins, so variants come before the family. Unknown cards get None.
_PEAK_FLOPS: tuple[tuple[re.Pattern[str], float | None, float | None, float | None], ...] = (
    # (pattern on the device name, bf16, tf32, fp32)
    (re.compile(r"\bH100\b.*\bNVL\b"), None, None, None),  # not tabulated: no guess
    (re.compile(r"\bH100\b.*\bPCIe\b", re.I), 756e12, 378e12, 51e12),
    (re.compile(r"\bH100\b"), 989.4e12, 494.7e12, 67e12),  # SXM5
    (re.compile(r"\bH200\b.*\bNVL\b"), None, None, None),
    (re.compile(r"\bH200\b"), 989.4e12, 494.7e12, 67e12),  # SXM
    (re.compile(r"\bA100\b"), 312e12, 156e12, 19.5e12),
    (re.compile(r"\bL4\b"), 121e12, 60e12, 30.3e12),
    (re.compile(r"\bA10G?\b"), 125e12, 62.5e12, 31.2e12),
    (re.compile(r"\bRTX 4090\b"), 165.2e12, 82.6e12, 82.6e12),
    (re.compile(r"\bV100S\b"), None, None, 16.4e12),
    (re.compile(r"\bV100\b.*PCIE", re.I), None, None, 14e12),
    (re.compile(r"\bV100\b"), None, None, 15.7e12),  # SXM2; no bf16 before Ampere
)


def peak_flops(gpu_name: str) -> dict[str, float | None]:
    """Dense datasheet peaks ``{"bf16", "tf32", "fp32"}`` for a GPU name; None if unknown."""
    for pattern, bf16, tf32, fp32 in _PEAK_FLOPS:
        if pattern.search(gpu_name):
            return {"bf16": bf16, "tf32": tf32, "fp32": fp32}
    return {"bf16": None, "tf32": None, "fp32": None}


def probe(
    *, nvml: Any = None, cuda: Any = None, cpuinfo_text: str | None = None
) -> HardwareProfile:
    """Measure this machine: its GPUs, its CPU and the software stack.

    ``nvml`` (a module like ``pynvml``), ``cuda`` (like ``torch.cuda``) and
    ``cpuinfo_text`` (the text of ``/proc/cpuinfo``) replace the real ones in tests.
    Nothing here raises for a missing or broken GPU stack: what cannot be measured is
    None, and ``notes`` says why.
    """
    import torch

    notes: list[str] = []
    if cuda is None:
        cuda = torch.cuda
    torch_cuda_version: str | None = torch.version.cuda
    gpus = _probe_gpus(nvml, cuda, torch_cuda_version, notes)
    cpu = _probe_cpu(cpuinfo_text, torch.get_num_threads())
    software = _probe_software(torch.__version__, torch_cuda_version, gpus)
    return HardwareProfile(gpus=gpus, cpu=cpu, software=software, notes=tuple(notes))


# --- GPUs ---------------------------------------------------------------------------------


def _probe_gpus(
    nvml: Any, cuda: Any, torch_cuda_version: str | None, notes: list[str]
) -> tuple[GPUInfo, ...]:
    props = _torch_devices(cuda, notes)
    with _nvml_session(nvml, notes, torch_sees_gpus=bool(props)) as session:
        unmatched = dict(session.handles) if session else {}
        gpus: list[GPUInfo] = []
        for index, prop in enumerate(props):
            if prop is None:
                continue
            handle = unmatched.pop(_normalize_uuid(getattr(prop, "uuid", None)) or "", None)
            if session is not None and handle is not None:
                gpus.append(session.gpu_info(index, handle, prop, torch_cuda_version))
                continue
            if session is not None:
                notes.append(
                    f"cuda:{index} ({prop.name}) has no matching NVML device (a MIG slice?); "
                    "its details come from torch.cuda"
                )
            gpus.append(_torch_gpu_info(index, prop, cuda, torch_cuda_version))
        if session is not None and unmatched:
            names = ", ".join(session.name(handle) or "?" for handle in unmatched.values())
            if not props:
                notes.append(
                    f"NVML sees {len(unmatched)} NVIDIA GPU(s) ({names}) but torch cannot use "
                    f"them: {_why_torch_has_no_cuda(torch_cuda_version)}"
                )
            elif all(gpu.source == "nvml" for gpu in gpus) and len(gpus) == len(props):
                visible = os.environ.get("CUDA_VISIBLE_DEVICES")
                notes.append(
                    f"NVML sees {len(unmatched)} more GPU(s) that torch does not use "
                    f"({names}); CUDA_VISIBLE_DEVICES={visible!r}"
                )
    return tuple(gpus)


def _why_torch_has_no_cuda(torch_cuda_version: str | None) -> str:
    if torch_cuda_version is None:
        return "this torch is a CPU build; install a CUDA build of torch to train on them"
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return f"CUDA_VISIBLE_DEVICES={visible!r} hides them"
    return (
        f"torch (built for CUDA {torch_cuda_version}) reports no usable device; "
        "the driver may be too old for this torch build"
    )


def _torch_devices(cuda: Any, notes: list[str]) -> list[Any]:
    """``get_device_properties`` of each device torch can use (None where it fails)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            count = int(cuda.device_count()) if cuda.is_available() else 0
        except Exception as exc:
            notes.append(f"torch.cuda failed: {_describe(exc)}")
            count = 0
    notes.extend(f"torch.cuda warned: {str(w.message).strip()}" for w in caught)
    props: list[Any] = []
    for index in range(count):
        try:
            props.append(cuda.get_device_properties(index))
        except Exception as exc:
            notes.append(f"cuda:{index}: torch.cuda.get_device_properties failed: {_describe(exc)}")
            props.append(None)
    return props


def _torch_gpu_info(index: int, prop: Any, cuda: Any, torch_cuda_version: str | None) -> GPUInfo:
    cc = (int(prop.major), int(prop.minor))
    free = _guard(lambda: int(cuda.mem_get_info(index)[0]))
    return GPUInfo(
        index=index,
        name=str(prop.name),
        total_memory_bytes=int(prop.total_memory),
        free_memory_bytes=free,
        compute_capability=cc,
        sm_count=_guard(lambda: int(prop.multi_processor_count)),
        bf16_supported=cc >= (8, 0),
        tf32_supported=cc >= (8, 0),
        driver_version=None,
        cuda_version=torch_cuda_version,
        processes=None,
        source="torch",
        uuid=_normalize_uuid(getattr(prop, "uuid", None)),
    )


class _NvmlSession:
    """An initialised NVML; every query is guarded so one failure costs one field."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.handles = self._handles_by_uuid()  # raises if NVML cannot list its devices
        self.driver_version = _guard(lambda: _text(nvml.nvmlSystemGetDriverVersion()))
        self.driver_cuda_version = _guard(
            lambda: _cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion()))
        )

    def _handles_by_uuid(self) -> dict[str, Any]:
        handles: dict[str, Any] = {}
        for i in range(int(self.nvml.nvmlDeviceGetCount())):
            handle = self.nvml.nvmlDeviceGetHandleByIndex(i)
            handles[self.uuid(handle) or f"nvml-index-{i}"] = handle
        return handles

    def uuid(self, handle: Any) -> str | None:
        return _guard(lambda: _normalize_uuid(self.nvml.nvmlDeviceGetUUID(handle)))

    def name(self, handle: Any) -> str | None:
        return _guard(lambda: _text(self.nvml.nvmlDeviceGetName(handle)))

    def gpu_info(
        self, index: int, handle: Any, prop: Any, torch_cuda_version: str | None
    ) -> GPUInfo:
        nvml = self.nvml
        memory = _guard(lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        cc = _guard(lambda: tuple(int(v) for v in nvml.nvmlDeviceGetCudaComputeCapability(handle)))
        if cc is None or len(cc) != 2:
            cc = (int(prop.major), int(prop.minor))
        power_mw = _guard(lambda: float(nvml.nvmlDeviceGetEnforcedPowerLimit(handle)))
        return GPUInfo(
            index=index,
            name=self.name(handle) or str(prop.name),
            total_memory_bytes=int(memory.total) if memory is not None else int(prop.total_memory),
            free_memory_bytes=int(memory.free) if memory is not None else None,
            compute_capability=(cc[0], cc[1]),
            sm_count=_guard(lambda: int(prop.multi_processor_count)),  # NVML does not say
            bf16_supported=cc >= (8, 0),
            tf32_supported=cc >= (8, 0),
            driver_version=self.driver_version,
            cuda_version=torch_cuda_version,
            processes=self._processes(handle),
            power_limit_watts=power_mw / 1000 if power_mw is not None else None,
            max_sm_clock_mhz=self._max_clock(handle, "NVML_CLOCK_SM", 1),
            max_memory_clock_mhz=self._max_clock(handle, "NVML_CLOCK_MEM", 2),
            source="nvml",
            uuid=self.uuid(handle),
            driver_cuda_version=self.driver_cuda_version,
        )

    def _max_clock(self, handle: Any, kind: str, default: int) -> int | None:
        clock = getattr(self.nvml, kind, default)
        return _guard(lambda: int(self.nvml.nvmlDeviceGetMaxClockInfo(handle, clock)))

    def _processes(self, handle: Any) -> tuple[GPUProcess, ...] | None:
        raw = _guard(lambda: list(self.nvml.nvmlDeviceGetComputeRunningProcesses(handle)))
        if raw is None:
            return None
        processes = []
        for proc in raw:
            used = getattr(proc, "usedGpuMemory", None)
            if used is not None and not 0 <= int(used) < 2**63:  # NVML's "not available"
                used = None
            pid = int(proc.pid)
            processes.append(
                GPUProcess(
                    pid=pid,
                    used_memory_bytes=int(used) if used is not None else None,
                    name=_process_name(pid),
                )
            )
        return tuple(processes)


@contextlib.contextmanager
def _nvml_session(
    nvml: Any, notes: list[str], *, torch_sees_gpus: bool
) -> Iterator[_NvmlSession | None]:
    """Initialise NVML (importing ``pynvml`` unless given one); None, with a note, if it
    cannot be; shut it down afterwards."""
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError as exc:
            notes.append(
                f"NVML unavailable (pynvml not importable: {exc}){_fallback(torch_sees_gpus)}"
            )
            yield None
            return
    try:
        nvml.nvmlInit()
    except Exception as exc:
        notes.append(f"NVML unavailable ({_describe(exc)}){_fallback(torch_sees_gpus)}")
        yield None
        return
    try:
        session = _NvmlSession(nvml)
    except Exception as exc:
        notes.append(f"NVML failed ({_describe(exc)}){_fallback(torch_sees_gpus)}")
        _guard(nvml.nvmlShutdown)
        yield None
        return
    try:
        yield session
    finally:
        _guard(nvml.nvmlShutdown)


def _fallback(torch_sees_gpus: bool) -> str:
    if torch_sees_gpus:
        return (
            "; GPU details come from torch.cuda (no driver version, processes, power or "
            "clock limits)"
        )
    return ""


def _normalize_uuid(value: Any) -> str | None:
    """NVML says ``GPU-8a3f...``, torch ``8a3f...``: compare without prefix or case."""
    if value is None:
        return None
    text = _text(value).strip().lower()
    for prefix in ("gpu-", "mig-"):
        text = text.removeprefix(prefix)
    return text or None


def _cuda_version_text(version: int) -> str:
    """NVML's integer CUDA version (12040) as text ("12.4")."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _process_name(pid: int) -> str | None:
    try:
        import psutil

        return str(psutil.Process(pid).name())
    except Exception:
        return None


# --- CPU ----------------------------------------------------------------------------------


def _probe_cpu(cpuinfo_text: str | None, torch_threads: int) -> CPUInfo:
    import psutil

    if cpuinfo_text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo_text = f.read()
        except OSError:
            cpuinfo_text = ""
    model_name, flags = parse_cpuinfo(cpuinfo_text)
    memory = psutil.virtual_memory()
    return CPUInfo(
        model_name=model_name or platform.processor() or platform.machine() or "unknown CPU",
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        total_ram_bytes=int(memory.total),
        available_ram_bytes=int(memory.available),
        isa_flags=tuple(flag for flag in ISA_FLAGS if flag in flags),
        torch_threads=torch_threads,
    )


def parse_cpuinfo(text: str) -> tuple[str | None, frozenset[str]]:
    """The model name and the flags of the first processor in ``/proc/cpuinfo`` text."""
    model_name: str | None = None
    flags: frozenset[str] = frozenset()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip().lower()
        if key == "model name" and model_name is None:
            model_name = value.strip() or None
        elif key == "flags" and not flags:
            flags = frozenset(value.split())
    return model_name, flags


# --- software -----------------------------------------------------------------------------


def _probe_software(
    torch_version: str, torch_cuda_version: str | None, gpus: tuple[GPUInfo, ...]
) -> SoftwareInfo:
    import autotune

    cpu_ok, cpu_reason = compile_check_cpu()
    if gpus:
        ok, reason = compile_check_cuda()
    else:
        ok, reason = cpu_ok, cpu_reason
    return SoftwareInfo(
        python_version=platform.python_version(),
        torch_version=str(torch_version),
        torch_cuda_version=torch_cuda_version,
        compile_available=ok,
        compile_reason=reason,
        optuna_version=_distribution_version("optuna"),
        autotune_version=autotune.__version__,
        compile_cpu_available=cpu_ok,
        compile_cpu_reason=cpu_reason,
        platform=platform.platform(),
    )


def _distribution_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _dynamo_problem() -> str | None:
    try:
        from torch._dynamo.eval_frame import is_dynamo_supported
    except Exception as exc:
        return f"torch._dynamo cannot be imported ({_describe(exc)})"
    if not is_dynamo_supported():
        return f"torch.compile does not support Python {platform.python_version()} in this torch"
    return None


def compile_check_cpu() -> tuple[bool, str]:
    """Whether Inductor's C++ backend can build kernels here: a compiler and Python.h."""
    problem = _dynamo_problem()
    if problem:
        return False, problem
    inductor = sys.modules.get("torch._inductor.config")  # honour a user's setting, if any
    if inductor is not None:
        candidates = [c for c in inductor.cpp.cxx if c]
    else:  # Inductor's default, without paying ~2 s to import its config
        default = "clang++" if sys.platform == "darwin" else "g++"
        candidates = [os.environ.get("CXX") or default]
    compiler = next((found for c in candidates if (found := shutil.which(c))), None)
    if compiler is None:
        return False, (
            f"no C++ compiler for the CPU backend (looked for {', '.join(candidates)}); "
            "install g++ or set CXX"
        )
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        return False, (
            f"{header} is missing; install the Python development headers (e.g. python3-dev)"
        )
    return True, f"Inductor's C++ backend can build with {compiler}"


def compile_check_cuda() -> tuple[bool, str]:
    """Whether Inductor's GPU backend (Triton) can run here."""
    problem = _dynamo_problem()
    if problem:
        return False, problem
    try:
        import triton
    except Exception as exc:
        return (
            False,
            f"triton cannot be imported ({_describe(exc)}); "
            "install the triton that matches this torch",
        )
    return True, f"Inductor's GPU backend can run (triton {getattr(triton, '__version__', '?')})"


# --- helpers ------------------------------------------------------------------------------


def _guard(query: Callable[[], T]) -> T | None:
    """The query's value, or None if it raises (NVML: not supported, no permission...)."""
    try:
        return query()
    except Exception:
        return None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _plain(value: Any) -> Any:
    """Tuples to lists, recursively: what JSON and yaml.safe_dump accept."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
