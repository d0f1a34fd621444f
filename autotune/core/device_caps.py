"""What one training device can run: its precisions (bf16, tf32, fp16), torch.compile, and
its dense peak FLOP/s.

``DeviceCaps`` owns the rules every caller uses: which precisions a device runs, whether
it trains linear layers in float8 (``fp8_problem``), and its peak FLOP/s for MFU.
``HardwareProfile.device(name)`` (``autotune.machine.profile``) builds one from a probed
machine; ``parse_device`` is the one reading of a device name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from autotune.core.errors import UsageError

__all__ = [
    "FP8_CAPABILITY",
    "PRECISIONS",
    "DeviceCaps",
    "parse_device",
    "peak_flops",
    "torchao_problem",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # TrainConfig.precision's values, in this order

# FP8 tensor cores: Ada (L4, RTX 4090) and Hopper (H100, H200) onwards.
FP8_CAPABILITY = (8, 9)


@dataclass(frozen=True, kw_only=True)
class DeviceCaps:
    """What one training device (``cpu`` or ``cuda:N``) supports, for validating configs.

    It owns the rules every caller uses: which precisions the device runs
    (``precisions``, ``precision_problem``, ``precision_warning``), whether it trains
    linear layers in float8 (``fp8_problem``) and its dense peak FLOP/s (``peak_flops``).
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
    compile_problem: str = ""  # why torch.compile cannot run here ("" where it can)
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

    def fp8_problem(self) -> str | None:
        """Why this device cannot train its linear layers in float8 (torchao's float8
        training), None where it can: a CUDA device of compute capability 8.9 or newer
        (FP8 tensor cores: L4, RTX 4090, H100, H200...) with torchao importable."""
        need = "{}.{}".format(*FP8_CAPABILITY)
        if self.kind != "cuda":
            return (
                f"float8 linear layers need a CUDA device with FP8 tensor cores (compute "
                f"capability {need} or newer), not {self.device}"
            )
        have = self.compute_capability
        if have is None:
            return (
                f"float8 linear layers need compute capability {need} or newer, and that "
                f"of {self.name} is unknown"
            )
        if tuple(have) < FP8_CAPABILITY:
            return (
                f"float8 linear layers need FP8 tensor cores (compute capability {need} or "
                f"newer: L4, RTX 4090, H100, H200) and {self.name} is {have[0]}.{have[1]}"
            )
        return torchao_problem()

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


def torchao_problem() -> str | None:
    """Why torchao's float8 training cannot be imported here, None where it can."""
    try:
        from torchao.float8 import convert_to_float8_training  # noqa: F401
    except ImportError as exc:
        return (
            f"float8 linear layers need torchao, which does not import here ({exc}): "
            "pip install 'autotune-train[fp8]'"
        )
    except Exception as exc:  # a torchao built for another torch fails in its own ways
        return f"torchao is installed but its float8 training does not import: {exc!r}"
    return None


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
