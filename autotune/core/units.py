"""Parsing and printing of units: memory sizes ("8GB", "8GiB", "8000MB", or a fraction
"0.5") and durations ("600", "600s", "10m", "1.5h")."""

from __future__ import annotations

import math
import re

from autotune.core.errors import BudgetError, UsageError
from autotune.core.validator import MAX_INT, duration_problem, show

__all__ = [
    "format_bytes",
    "format_figure",
    "over_budget",
    "parse_budget",
    "parse_duration",
    "throughput_label",
]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
}
_MAX_BUDGET_BYTES = MAX_INT  # a byte count (a preset's budget_bytes takes no more)
_PATTERN = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?|\.\d+)\s*(?P<unit>[a-zA-Z]*)\s*$")


def parse_budget(text: str | int, *, device_memory_bytes: int | None) -> int:
    """Return a memory budget in bytes.

    ``text`` is a size with a unit (``8GB``, ``8GiB``, ``8000MB``) or a bare fraction of
    the device's memory in (0, 1] (``0.5``). A bare number above 1 is refused: it is
    ambiguous (bytes? GB?), so the user must give a unit. An int (the Python API's) is a
    byte count, held to the same bounds.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text <= 0:
            raise BudgetError(f"budget must be positive, got {text!r}")
        if text > _MAX_BUDGET_BYTES:
            raise BudgetError(f"budget {text} is too large: no device has that much memory")
        return text
    text = str(text)
    match = _PATTERN.match(text)
    if match is None:
        raise BudgetError(
            f"cannot read budget {text!r}: expected a size such as 8GB, 8GiB or 8000MB, "
            "or a fraction of the device's memory such as 0.5"
        )
    number = float(match["num"])
    unit = match["unit"].lower()
    if number <= 0:
        raise BudgetError(f"budget must be positive, got {text!r}")
    if not math.isfinite(number) or number * _UNITS.get(unit, 1) > _MAX_BUDGET_BYTES:
        raise BudgetError(f"budget {text!r} is too large: no device has that much memory")
    if not unit:
        if number > 1:
            raise BudgetError(
                f"budget {text!r} has no unit: give a size such as {text}GB, or a fraction "
                "of the device's memory in (0, 1] such as 0.5"
            )
        if device_memory_bytes is None:
            raise BudgetError(
                f"budget {text!r} is a fraction, but this device's memory is unknown; "
                "give a size such as 8GB"
            )
        if device_memory_bytes > _MAX_BUDGET_BYTES:
            raise BudgetError(
                f"budget {text!r} is a fraction of {device_memory_bytes} bytes of memory, "
                "more than any device has"
            )
        return int(number * device_memory_bytes)
    if unit not in _UNITS:
        raise BudgetError(
            f"unknown unit {match['unit']!r} in budget {text!r}; use B, KB, MB, GB, TB, "
            "KiB, MiB, GiB or TiB"
        )
    value = int(number * _UNITS[unit])
    if value <= 0:  # under a byte
        raise BudgetError(f"budget must be at least one byte, got {text!r}")
    return value


def format_bytes(n: float | None) -> str:
    """Human-readable binary size: ``format_bytes(3 * 2**30) == '3.00 GiB'``."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def over_budget(peak: int | None, budget: int | None, *, whose: str = "peak") -> str | None:
    """Why a measured ``peak`` fails the memory budget, in the words every stage gives it
    (``peak 9.00 GiB over the budget of 8.00 GiB``); None where it is within it or either
    figure is unknown."""
    if peak is None or not budget or peak <= budget:
        return None
    return f"{whose} {format_bytes(peak)} over the budget of {format_bytes(budget)}"


_DURATION = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<unit>s|sec|m|min|h|hr)?\s*$", re.I)
_DURATION_UNITS = {"": 1, "s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hr": 3600}


def format_figure(value: float) -> str:
    """A measured figure as people read it: ``10,424`` (tokens/s), ``24.6`` (samples/s)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def parse_duration(text: str | float | int, *, what: str = "duration") -> float:
    """Seconds from ``"600"``, ``"600s"``, ``"10m"``, ``"1.5h"`` (or a number), within
    ``autotune.core.validator.MAX_SECONDS`` (a year).

    ``what`` names the value in the error: the parameter (``timeout``) from the Python
    API, the flag (``--timeout``) from the CLI.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        try:
            seconds = float(text)
        except OverflowError:  # an integer too large for a float: no time limit either
            seconds = math.inf
    else:
        match = _DURATION.match(str(text))
        if match is None:
            raise UsageError(
                f"cannot read {what} {text!r}: expected a duration such as 600, 600s, 10m or 1.5h"
            )
        seconds = float(match["num"]) * _DURATION_UNITS[(match["unit"] or "").lower()]
    wanted = duration_problem(seconds)
    if wanted is not None:
        raise UsageError(f"{what} must be {wanted}, got {show(text)}")
    return seconds


def throughput_label(unit: str) -> str:
    """The label of a throughput unit: ``"tokens"`` reads as tokens/s, anything else as
    samples/s. The one place that spells it (torch-free, so presets and the CLI can use it)."""
    return "tokens/s" if unit == "tokens" else "samples/s"
