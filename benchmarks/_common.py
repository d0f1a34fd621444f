"""Shared pieces of the benchmark scripts: the run header, Markdown tables, number formats.

Everything a script prints through here is plain Markdown, so its output can be pasted into
``BENCHMARKS.md`` as it is (the rule there: every figure comes from the script, on the
machine named in the header, in the same run).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import math
import os
import platform
import shlex
import signal
import statistics
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.machine.profile import HardwareProfile

__all__ = [
    "command_line",
    "fmt_float",
    "fmt_ratio",
    "fmt_seconds",
    "hardware_lines",
    "load_average",
    "render_table",
    "utc_now",
]


def utc_now() -> str:
    """``2025-01-31 14:05 UTC``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def command_line(argv: Sequence[str] | None = None, *, script: str | None = None) -> str:
    """The command as a user would type it again: ``python benchmarks/compare.py --model mu``."""
    args = list(sys.argv[1:] if argv is None else argv)
    prog = script if script is not None else sys.argv[0]
    with contextlib.suppress(ValueError):  # another drive (Windows)
        prog = os.path.relpath(prog)
    return shlex.join(["python", prog, *args])


def load_average() -> str:
    """The 1/5/15-minute load average (other work on the machine shows up as noise)."""
    if not hasattr(os, "getloadavg"):
        return "n/a"
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def hardware_lines(profile: HardwareProfile, device: str) -> list[str]:
    """What the figures were measured on: the device, the CPU, the software stack."""
    caps = profile.device(device)
    cpu = profile.cpu
    sw = profile.software
    lines = []
    if caps.kind == "cuda":
        gpu = next(g for g in profile.gpus if f"cuda:{g.index}" == caps.device)
        cc = ".".join(map(str, gpu.compute_capability))
        lines.append(
            f"GPU: {gpu.name} ({caps.device}), {gpu.total_memory_bytes / 1e9:.1f} GB, "
            f"compute capability {cc}, driver {gpu.driver_version or 'n/a'}, "
            f"CUDA {gpu.cuda_version or 'n/a'}"
        )
    cores = f"{cpu.logical_cores} logical cores"
    if cpu.physical_cores is not None:
        cores = f"{cpu.physical_cores} physical / {cores}"
    isa = ", ".join(cpu.isa_flags) or "none of avx2/avx512/amx"
    lines.append(
        f"CPU: {cpu.described}, {cores}, {cpu.total_ram_bytes / 1e9:.1f} GB RAM, "
        f"ISA: {isa}; torch threads {cpu.torch_threads}"
    )
    lines.append(
        f"software: torch {sw.torch_version}, Python {sw.python_version}, "
        f"optuna {sw.optuna_version or 'n/a'}, autotune {sw.autotune_version}, "
        f"{sw.platform or platform.platform()}"
    )
    caps_bits = [
        f"bf16 {'native' if caps.bf16_native else 'emulated' if caps.bf16 else 'no'}",
        f"tf32 {'yes' if caps.tf32 else 'no'}",
        f"fp16 {'yes' if caps.fp16 else 'no'}",
        f"torch.compile {'yes' if caps.compile else 'no'}",
    ]
    lines.append(f"device {caps.device}: " + ", ".join(caps_bits))
    return lines


def render_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, align: str | None = None
) -> str:
    """A Markdown table with padded columns; ``align`` is one letter per column (l or r)."""
    if align is None:
        align = "l" * len(headers)
    if len(align) != len(headers) or any(a not in "lr" for a in align):
        raise ValueError(f"align must be one of l/r per column, got {align=} for {len(headers)}")
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, expected {len(headers)}: {row!r}")
    cells = [[c.replace("|", "\\|") for c in row] for row in [list(headers), *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if a == "r" else c.ljust(w)
            for c, w, a in zip(row, widths, align, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    rule = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if a == "r" else "-" * (w + 2)
            for w, a in zip(widths, align, strict=True)
        )
        + "|"
    )
    return "\n".join([line(cells[0]), rule, *(line(r) for r in cells[1:])])


def fmt_float(value: float | None, *, digits: int = 3) -> str:
    """``12,345`` for large numbers, three significant digits for small ones; ``-`` for None."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) >= 10**digits:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def fmt_ratio(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.2f}x"


def fmt_seconds(value: float | None) -> str:
    """``0.412 s``, ``12.3 s``, ``4 min 05 s``; ``-`` for None."""
    if value is None or not math.isfinite(value):
        return "-"
    if value >= 120:
        minutes, seconds = divmod(round(value), 60)
        return f"{minutes} min {seconds:02d} s"
    return f"{value:.3g} s"


@contextlib.contextmanager
def empty_compile_cache(prefix: str) -> Iterator[str]:
    """An empty torch.compile cache folder of its own for the bursts started inside (their
    children inherit ``TORCHINDUCTOR_CACHE_DIR``), removed after, the user's setting back."""
    import shutil
    import tempfile

    from autotune.machine.compile_cache import compile_cache_at

    cache = tempfile.mkdtemp(prefix=prefix)
    try:
        with compile_cache_at(cache):
            yield cache
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def run_rounds_then_table(
    run: Callable[[], object], cells: Mapping[Any, Sequence[object]], table: Callable[[], str]
) -> int:
    """Run a script's rounds (``run``, which fills ``cells``), then print the load average
    and ``table()``; the exit code. SIGTERM stops the rounds as Ctrl-C does (the caller's
    handler back after): each burst's supervisor has killed its process by then, the
    table holds the bursts measured so far, stderr says it is not a full run, and the
    exit code is 130 (Ctrl-C) or 143 (SIGTERM), not a traceback."""

    def _interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(128 + signum)

    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        run()
    except KeyboardInterrupt as stop:
        code = int(stop.args[0]) if stop.args else 130
        print(
            f"- interrupted ({'SIGTERM' if code == 143 else 'Ctrl-C'}): the bursts measured "
            f"so far, not a full run; load average {load_average()}\n",
            file=sys.stderr,
        )
        if any(cells.values()):
            print(table())
        return code
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(f"- load average at the end: {load_average()}\n")
    print(table())
    return 0


def median_of(values: Sequence[float | None]) -> float | None:
    """The median of the figures that exist (a failed burst has None), or None."""
    ok = [v for v in values if v is not None]
    return statistics.median(ok) if ok else None


def ratio_of(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None where either figure is missing (or ``b`` is zero)."""
    return None if a is None or not b else a / b
