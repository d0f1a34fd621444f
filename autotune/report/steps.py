"""The report's "Where a step's time goes" section: the naive config's and the winner's
profiled steps (``autotune search --profile``) as stacked bars on one scale, then each
one's verdict with its evidence and the knobs that address it. The page shows the section
only where the study kept a profile."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.report import plots
from autotune.report.blocks import Block, Text, make_figure, note, table

if TYPE_CHECKING:
    from autotune.report.data import ProfiledConfig, ReportData

__all__ = ["STEPS_SECTION", "section_steps"]

STEPS_SECTION = ("steps", "Where a step's time goes")


def section_steps(data: ReportData) -> list[Block]:
    """The bars, a table of each part in ms, and each config's verdict."""
    if not data.profile:
        return [note("This search ran without --profile, so no step was profiled.")]
    rows = [(p.label, _parts(p)) for p in data.profile]
    caption = (
        "Milliseconds per optimizer step, by part, from a profiled burst of each config "
        "(its own burst: the search's figures never carry the profiler). Compilation is "
        "one-off and not part of a step."
    )
    fig = make_figure(plots.profile_figure(rows), "steps", caption)
    parts = [name for name, _, _ in plots.STEP_PARTS]
    header = ["config", *(label for _, _, label in plots.STEP_PARTS), "step", "compile"]
    cells = [
        (
            label,
            *(f"{values.get(k, 0.0) * 1e3:.2f} ms" for k in parts),
            f"{p.breakdown.step_s * 1e3:.2f} ms",
            "-" if p.breakdown.compile_s is None else f"{p.breakdown.compile_s:.1f} s",
        )
        for p, (label, values) in zip(data.profile, rows, strict=True)
    ]
    out: list[Block] = [fig, table(header, cells)]
    for p in data.profile:
        out.extend(_verdict(p))
    return out


def _parts(p: ProfiledConfig) -> dict[str, float]:
    return {name: float(p.breakdown.parts.get(name, 0.0)) for name, _, _ in plots.STEP_PARTS}


def _verdict(p: ProfiledConfig) -> list[Block]:
    """One config's verdict: the limit, its evidence, the knobs to try, what is unknown."""
    v = p.verdict
    said = f"{v.kind}: {v.evidence}" if v.evidence else v.kind
    out: list[Block] = [Text(p.label, style="h3"), Text(f"Verdict: {said}.")]
    others = [f"{f.kind}: {f.evidence}" for f in v.findings if f.kind != v.kind]
    if others:
        out.append(Text("Also: " + "; ".join(others) + "."))
    if v.knobs:
        out.append(Text("Knobs that address it, first one first: ", code=", ".join(v.knobs)))
    if v.unknown:
        out.append(note("; ".join(v.unknown)))
    return out
