"""How a breakdown and its verdict are shown: ``explain_result`` (a profiled burst's
breakdown and verdict), ``table_rows`` (the CLI's table), ``compact`` (one line for a
preset's notes) and ``markdown`` (the benchmark's table of several configs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Protocol

from autotune.explain.breakdown import PARTS, Breakdown
from autotune.explain.verdict import StepVerdict, classify

__all__ = ["compact", "explain_result", "explain_to_dict", "markdown", "table_rows"]

_LABELS = {
    "data_wait": "data wait",
    "h2d": "host-to-device copy",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer step",
    "rest": "rest (Python, launches, sync)",
}


class ProfiledBurst(Protocol):
    """What ``explain_result`` reads of a burst's result (``autotune.burst.result``)."""

    @property
    def breakdown(self) -> Any: ...
    @property
    def compile_s(self) -> float | None: ...
    @property
    def mfu(self) -> float | None: ...
    @property
    def peak_memory_bytes(self) -> int | None: ...


def explain_result(
    result: ProfiledBurst, *, budget_bytes: int | None = None
) -> tuple[Breakdown, StepVerdict] | None:
    """The breakdown of a profiled burst (its compile seconds from the burst) and its
    verdict; None for a burst that brought no breakdown back."""
    if not result.breakdown:
        return None
    breakdown = replace(Breakdown.from_dict(result.breakdown), compile_s=result.compile_s)
    verdict = classify(
        breakdown, mfu=result.mfu, peak_bytes=result.peak_memory_bytes, budget_bytes=budget_bytes
    )
    return breakdown, verdict


def explain_to_dict(breakdown: Breakdown, verdict: StepVerdict) -> dict[str, Any]:
    """Both, as JSON: ``{"breakdown": ..., "verdict": ...}``."""
    return {"breakdown": breakdown.to_dict(), "verdict": verdict.to_dict()}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def table_rows(breakdown: Breakdown, verdict: StepVerdict) -> list[tuple[str, str]]:
    """(label, value) rows: each part with its share, each module's forward and
    backward, compile apart, then the verdict, its evidence and its knobs."""
    b = breakdown
    rows = [("profiled step", f"{_ms(b.step_s)} (mean of {b.steps} profiled steps)")]
    for part in (*PARTS, "rest"):
        rows.append((f"  {_LABELS[part]}", f"{_ms(b.parts.get(part, 0.0))} ({b.share(part):.0%})"))
    rows.append(("  operators", f"{b.ops_per_step:.0f} per step, {_ms(b.op_s)} inside them"))
    if b.device_busy_s is not None:
        rows.append(("  GPU busy", f"{_ms(b.device_busy_s)}"))
    if b.compile_s is not None:
        rows.append(("compile (once)", f"{b.compile_s:.2f} s, not part of the step"))
    for name, times in b.modules.items():
        both = f"forward {_ms(times['forward'])}, backward {_ms(times['backward'])}"
        rows.append((f"  module {name}", both))
    if b.modules_note:
        rows.append(("  modules", b.modules_note))
    rows.append(("verdict", verdict.kind))
    for finding in verdict.findings:
        rows.append((f"  {finding.kind}", f"{finding.evidence}; knobs: {', '.join(finding.knobs)}"))
    for line in verdict.unknown:
        rows.append(("  unknown", line))
    if b.trace_path:
        rows.append(("trace", b.trace_path))
    return rows


def compact(label: str, breakdown: Breakdown, verdict: StepVerdict) -> str:
    """One line for a preset's notes: the step's parts as shares, and the verdict."""
    parts = ", ".join(
        f"{_LABELS[p].split(' (')[0]} {breakdown.share(p):.0%}" for p in (*PARTS, "rest")
    )
    return f"profile of {label}: step {_ms(breakdown.step_s)} = {parts}; {verdict.summary()}"


def markdown(columns: Sequence[tuple[str, Breakdown, StepVerdict]]) -> str:
    """A Markdown table: one column per (label, breakdown, verdict), one row per part."""
    head = "| part | " + " | ".join(label for label, _, _ in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]

    def row(name: str, cells: Sequence[str]) -> None:
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    row("step", [_ms(b.step_s) for _, b, _ in columns])
    for part in (*PARTS, "rest"):
        row(
            _LABELS[part],
            [f"{_ms(b.parts.get(part, 0.0))} ({b.share(part):.0%})" for _, b, _ in columns],
        )
    row("operators per step", [f"{b.ops_per_step:.0f}" for _, b, _ in columns])
    compiles = [b.compile_s for _, b, _ in columns]
    row("compile (once)", ["-" if c is None else f"{c:.2f} s" for c in compiles])
    row("verdict", [v.kind for _, _, v in columns])
    row("evidence", [v.evidence.replace("|", "/") or "-" for _, _, v in columns])
    row("knobs to turn", [", ".join(v.knobs) or "-" for _, _, v in columns])
    return "\n".join(lines)
