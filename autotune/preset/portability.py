"""Portability: how this machine compares with the one a preset was measured on.

``check_portability`` compares a preset's fingerprint with a device here, warns where the
figures were measured elsewhere, and refuses what the device cannot run (a precision it
lacks, a recorded peak above its free memory) with what to do instead.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autotune.core.errors import HardwareMismatchError
from autotune.core.plain import to_plain
from autotune.core.units import format_bytes
from autotune.preset.sections import Fingerprint, Preset, find_device

if TYPE_CHECKING:
    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import HardwareProfile

__all__ = ["PortabilityReport", "check_portability", "default_device_for", "same_device"]


@dataclass(kw_only=True)
class PortabilityReport:
    """How this device compares with the one a preset was measured on."""

    same_device: bool
    differences: list[str]
    warnings: list[str]
    measured_elsewhere: bool
    device: str = ""  # the device checked here: cpu, cuda:0, ...
    device_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


def default_device_for(preset: Preset, profile: HardwareProfile) -> str:
    """The device a preset runs on here by default: a GPU for a GPU preset where there is one."""
    if preset.fingerprint.device_kind == "cuda" and profile.gpus:
        return "cuda:0"
    return "cpu" if preset.fingerprint.device_kind == "cpu" else profile.default_device


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def _differences(there: Fingerprint, here: Fingerprint) -> list[str]:
    """Each fingerprint field that differs, as ``name: preset X vs here Y``."""
    out = []
    for f in dataclasses.fields(Fingerprint):
        a, b = getattr(there, f.name), getattr(here, f.name)
        if f.name == "memory_bytes" and _about_the_same(a, b):
            continue  # the kernel's count moves by some KiB between boots and versions
        if a != b:
            shown_a = format_bytes(a) if f.name == "memory_bytes" else a
            shown_b = format_bytes(b) if f.name == "memory_bytes" else b
            out.append(f"{f.name}: preset {shown_a!s} vs here {shown_b!s}")
    return out


def _about_the_same(a: int | None, b: int | None) -> bool:
    """Two memory sizes within 1% of each other, as ``format_bytes`` shows them alike."""
    return a is not None and b is not None and abs(a - b) <= 0.01 * max(a, b)


def same_device(there: Fingerprint, here: Fingerprint, *, on_gpu: bool) -> bool:
    """The same GPU model, or (on a CPU) the same CPU model and core count, and the same
    CPU family and model numbers where both fingerprints have them (a VM that names only
    the brand, "AMD EPYC", may be one generation or another)."""
    if on_gpu:
        return there.device_kind == "cuda" and _same_name(there.device_name, here.device_name)
    return (
        there.device_kind == "cpu"
        and _same_name(there.cpu_model, here.cpu_model)
        and there.cpu_cores == here.cpu_cores
        and _same_generation(there, here)
    )


def _same_generation(there: Fingerprint, here: Fingerprint) -> bool:
    """Not told apart where either fingerprint lacks the numbers (an older preset)."""
    if there.cpu_family is None or here.cpu_family is None:
        return True
    return (there.cpu_family, there.cpu_model_number) == (here.cpu_family, here.cpu_model_number)


def _check_arguments(preset: Any, profile: Any, device: Any, force: Any) -> None:
    """A ``UsageError`` naming the argument of the wrong type: ``check_portability("best.yaml",
    ...)`` was an AttributeError from inside."""
    from autotune.core.errors import UsageError
    from autotune.machine.profile import HardwareProfile

    problems = []
    if not isinstance(preset, Preset):
        problems.append(f"preset must be a Preset (load_preset), got {type(preset).__name__}")
    if not isinstance(profile, HardwareProfile):
        problems.append(
            f"profile must be a HardwareProfile (probe()), got {type(profile).__name__}"
        )
    if device is not None and not isinstance(device, str):
        problems.append(
            f"device must be a str (cpu, cuda, cuda:N) or None, got {type(device).__name__}"
        )
    if not isinstance(force, bool):
        problems.append(f"force must be True or False, got {type(force).__name__}")
    if problems:
        raise UsageError("check_portability: " + "; ".join(problems))


def check_portability(
    preset: Preset, profile: HardwareProfile, device: str | None = None, *, force: bool = False
) -> PortabilityReport:
    """Compare ``preset``'s fingerprint with ``device`` on this machine.

    Same GPU model (or CPU model and core count): fine. Different: a warning, and the
    figures are marked as measured elsewhere. A precision this device cannot run, float8
    linear layers it cannot run (no FP8 tensor cores, no torchao), or a recorded peak
    memory above this device's free memory, raises ``HardwareMismatchError`` with what to
    do instead; ``force=True`` turns the memory refusal into a warning (an unrunnable
    precision or float8 is refused even then).
    """
    _check_arguments(preset, profile, device, force)
    canonical, gpu = find_device(device or default_device_for(preset, profile), profile)
    here = Fingerprint.from_profile(profile, canonical)
    there = preset.fingerprint

    differences = _differences(there, here)
    same = same_device(there, here, on_gpu=gpu is not None)
    warnings = []
    if not same:
        warnings.append(
            f"this preset was measured on {there.describe()}, not on {here.describe()}: its "
            "figures were measured elsewhere and may not hold here (re-measure with "
            "`autotune presets check`)"
        )
    elif there.torch_version != here.torch_version:
        warnings.append(
            f"measured with torch {there.torch_version}, this is torch {here.torch_version}: "
            "throughput may differ"
        )

    caps = profile.device(canonical)
    refusals = _precision_refusals(preset.config.precision, caps, warnings)
    refusals += _fp8_refusals(preset.config.fp8_linears, caps)
    peak = preset.measured.peak_memory_bytes
    if gpu is not None:
        free = gpu.free_memory_bytes
        where = f"{canonical} ({gpu.name})"
        if free is None:
            free = gpu.total_memory_bytes
            warnings.append(f"free memory of {where} unknown; compared with its total memory")
        what = "free GPU memory"
    else:
        free = profile.cpu.available_ram_bytes
        where = "this machine"
        what = "available RAM"
    if peak is None:
        warnings.append("the preset records no peak memory, so whether it fits here is unchecked")
    elif peak > free:
        message = (
            f"the preset's recorded peak memory {format_bytes(peak)} exceeds the "
            f"{format_bytes(free)} of {what} on {where}"
        )
        if force:
            warnings.append(message + " (forced: it may run out of memory)")
        else:
            refusals.append(
                message + "; free some memory, pick a smaller preset, or force it (--force)"
            )
    if refusals:
        raise HardwareMismatchError(
            f"preset {preset.name!r} cannot run on {canonical} ({here.device_name}): "
            + "; and ".join(refusals)
        )
    return PortabilityReport(
        same_device=same,
        differences=differences,
        warnings=warnings,
        measured_elsewhere=not same,
        device=canonical,
        device_name=here.device_name,
    )


def _fp8_refusals(fp8_linears: bool, caps: DeviceCaps) -> list[str]:
    """Why the preset's float8 linear layers cannot run on ``caps`` (the device's own rule:
    FP8 tensor cores and torchao), with what to set instead."""
    problem = caps.fp8_problem() if fp8_linears else None
    if problem is None:
        return []
    return [
        f"config.fp8_linears: {problem}; set config.fp8_linears: false, or search again on "
        f"{caps.device}"
    ]


def _precision_refusals(precision: str, caps: DeviceCaps, warnings: list[str]) -> list[str]:
    """Why ``precision`` cannot run on ``caps`` (the device's own rule), with the fallback
    to set; a precision that runs but slowly adds a warning."""
    problem = caps.precision_problem(precision)
    if problem is not None:
        fallback = caps.fallback_precision(precision)
        return [
            f"config.precision {problem}: set config.precision: {fallback}, "
            f"or search again on {caps.device}"
        ]
    slow = caps.precision_warning(precision)
    if slow is not None:
        warnings.append(f"config.precision {precision}: {slow}")
    return []
