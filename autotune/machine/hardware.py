"""What this machine can do for training, measured: ``probe()`` finds its GPUs (NVML,
falling back to torch.cuda), its CPU and its software stack, and returns a typed
``HardwareProfile`` (``autotune.machine.profile``); the search, the burst runner and
presets all use it.

GPU indices are torch's (``cuda:N``, after ``CUDA_VISIBLE_DEVICES``); NVML's handles are
matched to them by UUID, never by position. Probing a GPU through torch initialises the
CUDA runtime in this process but allocates nothing on the device, except in the torch
fallback, where reading free memory (``torch.cuda.mem_get_info``) creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import shutil
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from autotune.machine.profile import (
    ISA_FLAGS,
    CPUInfo,
    GPUInfo,
    GPUProcess,
    HardwareProfile,
    SoftwareInfo,
)

__all__ = ["compile_check_cpu", "compile_check_cuda", "parse_cpu_family", "parse_cpuinfo", "probe"]

T = TypeVar("T")


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

    if cpuinfo_text is not None and not isinstance(cpuinfo_text, str):
        from autotune.core.errors import UsageError

        raise UsageError(
            f"probe: cpuinfo_text must be the text of /proc/cpuinfo (a str) or None, got "
            f"{type(cpuinfo_text).__name__}"
        )
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
    family, model_number = parse_cpu_family(cpuinfo_text)
    memory = psutil.virtual_memory()
    return CPUInfo(
        model_name=model_name or platform.processor() or platform.machine() or "unknown CPU",
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        total_ram_bytes=int(memory.total),
        available_ram_bytes=int(memory.available),
        isa_flags=tuple(flag for flag in ISA_FLAGS if flag in flags),
        torch_threads=torch_threads,
        family=family,
        model_number=model_number,
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


def parse_cpu_family(text: str) -> tuple[int | None, int | None]:
    """x86's CPU family and model numbers of the first processor in ``/proc/cpuinfo``
    text; None for each where absent (another architecture) or not a number. Two 2-core
    VMs that both said "AMD EPYC" with AVX-512 bf16 ran the same compiled bf16 config of
    mu at 3,889 and 6,785 tokens/s (2026-11-22 and 11-29, the same code): only the family
    (26 on the faster one) tells such machines apart."""
    numbers: dict[str, int | None] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip().lower()
        if sep and key in ("cpu family", "model") and key not in numbers:
            digits = value.strip()
            numbers[key] = int(digits) if digits.isascii() and digits.isdecimal() else None
        elif not line.strip() and numbers:  # the end of the first processor's block
            break
    return numbers.get("cpu family"), numbers.get("model")


# --- software -----------------------------------------------------------------------------


def _probe_software(
    torch_version: str, torch_cuda_version: str | None, gpus: tuple[GPUInfo, ...]
) -> SoftwareInfo:
    from autotune._version import __version__

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
        autotune_version=__version__,
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
    if problem := _does_not_run(compiler):  # CXX=/bin/false was "can build with /bin/false"
        return False, problem
    header = os.path.join(sysconfig.get_paths()["include"], "Python.h")
    if not os.path.exists(header):
        return False, (
            f"{header} is missing; install the Python development headers (e.g. python3-dev)"
        )
    return True, f"Inductor's C++ backend can build with {compiler}"


def _does_not_run(compiler: str) -> str | None:
    """Why ``compiler --version`` fails (a few milliseconds for a real compiler), or None."""
    import subprocess

    try:
        done = subprocess.run([compiler, "--version"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (
            f"the C++ compiler {compiler} does not run ({_describe(exc)}); install g++ or set CXX"
        )
    if done.returncode != 0:
        return (
            f"the C++ compiler {compiler} does not run (`{compiler} --version` exited "
            f"{done.returncode}); install g++ or set CXX to one that works"
        )
    return None


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
