"""`autotune probe`: what this machine can do for training, as a table or as JSON.

torch and rich are imported inside the command, so `autotune --help` stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli._common import cli_command, print_json

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from autotune.core.device_caps import DeviceCaps
    from autotune.machine.profile import GPUInfo, HardwareProfile

__all__ = ["probe", "render"]


@cli_command
def probe(
    json_output: Annotated[
        bool,
        typer.Option("--json", help="Print the profile as JSON (its schema: docs/probe.md)."),
    ] = False,
) -> None:
    """Show the GPUs, CPU and software this machine trains with, and what they support."""
    from autotune.machine import hardware

    profile = hardware.probe()
    if json_output:
        print_json(profile.to_dict())
        return
    from rich.console import Console

    render(profile, Console(highlight=False))


def render(profile: HardwareProfile, console: Console) -> None:
    """The human-readable form of a profile: the device first, then GPUs, CPU, software."""
    if profile.gpus:
        gpu0 = profile.gpus[0]
        count = f"{len(profile.gpus)} NVIDIA GPU(s)"
        console.print(f"[bold]{count}[/]; the default device is cuda:0 ({gpu0.name}).")
    else:
        console.print("[bold]No NVIDIA GPU found; the device is the CPU.[/]")
    console.print()

    tables = [_kv_table(f"cuda:{gpu.index}", _gpu_rows(gpu, profile)) for gpu in profile.gpus]
    tables.append(_kv_table("CPU" if profile.gpus else "cpu (the device)", _cpu_rows(profile)))
    tables.append(_kv_table("Software", _software_rows(profile)))
    for table in tables:
        console.print(table)
        console.print()
    if profile.notes:
        console.print("[bold]Notes[/]")
        for note in profile.notes:
            console.print(f"  - {note}", markup=False)


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    from rich.table import Table

    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, value)
    return table


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def _flops(value: float | None) -> str:
    return f"{value / 1e12:.1f} T" if value is not None else "unknown"


def _peaks(caps: DeviceCaps) -> str:
    return (
        f"bf16 {_flops(caps.peak_flops_bf16)}, tf32 {_flops(caps.peak_flops_tf32)}, "
        f"fp32 {_flops(caps.peak_flops_fp32)} (datasheet, dense)"
    )


def _gpu_rows(gpu: GPUInfo, profile: HardwareProfile) -> list[tuple[str, str]]:
    from autotune.core.units import format_bytes

    caps = profile.device(f"cuda:{gpu.index}")
    if gpu.free_memory_bytes is not None:
        memory = f"{format_bytes(gpu.free_memory_bytes)} free of "
    else:
        memory = "free unknown, "
    memory += format_bytes(gpu.total_memory_bytes)
    driver = gpu.driver_version or "unknown"
    if gpu.driver_cuda_version:
        driver += f" (supports CUDA up to {gpu.driver_cuda_version})"
    major, minor = gpu.compute_capability
    clocks = []
    if gpu.max_sm_clock_mhz is not None:
        clocks.append(f"SM {gpu.max_sm_clock_mhz} MHz")
    if gpu.max_memory_clock_mhz is not None:
        clocks.append(f"memory {gpu.max_memory_clock_mhz} MHz")
    power = f"{gpu.power_limit_watts:.0f} W" if gpu.power_limit_watts is not None else "unknown"
    compile_reason = caps.compile_problem or profile.software.compile_reason
    return [
        ("Name", gpu.name),
        ("Memory", memory),
        ("Compute capability", f"{major}.{minor}"),
        ("SMs", str(gpu.sm_count) if gpu.sm_count is not None else "unknown"),
        ("bf16 / tf32 / fp16", f"{_yes_no(caps.bf16)} / {_yes_no(caps.tf32)} / yes"),
        ("Peak FLOP/s", _peaks(caps)),
        ("torch.compile", f"{_yes_no(caps.compile)}: {compile_reason}"),
        ("Driver", driver),
        ("torch built for CUDA", gpu.cuda_version or "none (a CPU build of torch)"),
        ("Power limit", power),
        ("Max clocks", ", ".join(clocks) or "unknown"),
        ("Processes", _processes(gpu)),
        ("Source", "NVML" if gpu.source == "nvml" else "torch.cuda (NVML unavailable)"),
    ]


def _processes(gpu: GPUInfo) -> str:
    from autotune.core.units import format_bytes

    if gpu.processes is None:
        return "unknown"
    if not gpu.processes:
        return "none"
    return "; ".join(
        f"pid {p.pid}{f' ({p.name})' if p.name else ''}: "
        + (format_bytes(p.used_memory_bytes) if p.used_memory_bytes is not None else "? bytes")
        for p in gpu.processes
    )


def _cpu_rows(profile: HardwareProfile) -> list[tuple[str, str]]:
    from autotune.core.units import format_bytes

    cpu = profile.cpu
    caps = profile.device("cpu")
    physical = str(cpu.physical_cores) if cpu.physical_cores is not None else "unknown"
    bf16 = "native (avx512_bf16/amx)" if cpu.bf16_native else "emulated (slow)"
    return [
        ("Model", cpu.described),
        ("Cores", f"{physical} physical, {cpu.logical_cores} logical"),
        ("torch threads", str(cpu.torch_threads)),
        (
            "RAM",
            f"{format_bytes(cpu.available_ram_bytes)} available of "
            f"{format_bytes(cpu.total_ram_bytes)}",
        ),
        ("ISA flags", " ".join(cpu.isa_flags) or "none of avx2, avx512f, avx512_bf16, amx"),
        ("bf16", bf16),
        ("fp16 / tf32", "no / no (CUDA only)"),
        ("torch.compile", f"{_yes_no(caps.compile)}: {profile.software.compile_cpu_reason}"),
    ]


def _software_rows(profile: HardwareProfile) -> list[tuple[str, str]]:
    sw = profile.software
    build = f"CUDA {sw.torch_cuda_version}" if sw.torch_cuda_version else "CPU build"
    return [
        ("Python", f"{sw.python_version} ({sw.platform})" if sw.platform else sw.python_version),
        ("torch", f"{sw.torch_version} ({build})"),
        ("optuna", sw.optuna_version or "not installed"),
        ("autotune", sw.autotune_version),
    ]
