"""Hand-made ``DeviceCaps`` for tests that need a device's capabilities to be exactly
known (a probed profile depends on the machine running the tests)."""

from __future__ import annotations

from autotune.core.device_caps import DeviceCaps

__all__ = ["cpu_caps", "cuda_caps"]


def cpu_caps(
    *,
    compile: bool = True,
    bf16_native: bool = False,
    peak_flops_bf16: float | None = None,
    peak_flops_fp32: float | None = None,
) -> DeviceCaps:
    """A 16 GiB CPU: bf16 (natively only if asked), no fp16 or TF32; peaks for MFU if given."""
    return DeviceCaps(
        device="cpu",
        kind="cpu",
        name="Test CPU",
        total_memory_bytes=16 * 2**30,
        bf16=True,
        bf16_native=bf16_native,
        fp16=False,
        tf32=False,
        compile=compile,
        peak_flops_bf16=peak_flops_bf16,
        peak_flops_fp32=peak_flops_fp32,
    )


def cuda_caps(
    *, ampere: bool = True, compute_capability: tuple[int, int] | None = None
) -> DeviceCaps:
    """An 80 GiB GPU: Ampere or later has bf16 and TF32, an older one has neither; its
    compute capability unknown unless given (float8 needs 8.9: ``DeviceCaps.fp8_problem``)."""
    return DeviceCaps(
        device="cuda:0",
        kind="cuda",
        name="Test GPU",
        total_memory_bytes=80 * 2**30,
        bf16=ampere,
        bf16_native=ampere,
        fp16=True,
        tf32=ampere,
        compile=True,
        compute_capability=compute_capability,
    )
