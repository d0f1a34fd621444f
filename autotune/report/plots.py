"""The report's plots, drawn with matplotlib: inline SVG for the page, PNG for ``--png``.

matplotlib renders static SVG (text as paths, so no font is fetched) and PNG from the same
drawing code, with no JavaScript: the page works offline and a browser has nothing to run.
Each ``draw_*`` function draws on an Axes it is given, so the summary image reuses the
page's two main plots. Figures are made with ``matplotlib.figure.Figure`` (no pyplot, no
global backend).
"""

from __future__ import annotations

import io
import re
import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.study.plan.space import BUILTIN_KNOBS
from autotune.study.trials.records import TrialRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from autotune.report.data import ReportData

__all__ = [
    "KNOB_FIELDS",
    "draw_history",
    "draw_memory",
    "figure_png",
    "figure_svg",
    "finalists_figure",
    "history_figure",
    "importance_figure",
    "knob_values",
    "knobs_figure",
    "memory_figure",
    "profile_figure",
    "require_matplotlib",
    "summary_png",
]

# The PNG's "Software" text: how a rerun knows the image at --png is a report's to replace.
PNG_SOFTWARE = "autotune report"

# The look of each kind of trial, the same in every plot.
_OK = {"marker": "o", "color": "#1f77b4", "label": "measured"}
_INFEASIBLE = {"marker": "x", "color": "#d62728", "label": "infeasible (OOM, over budget)"}
_PRUNED = {"marker": "v", "color": "#ff7f0e", "label": "pruned (clearly slower)"}
_STOPPED = {"marker": "^", "color": "#9467bd", "label": "stopped (the time limit)"}
_FAILED = {"marker": "s", "color": "#7f7f7f", "label": "failed (crash, timeout, NaN)"}
_BEST = "#2ca02c"

# The config fields shown per knob: the search's own knobs (then the model's).
KNOB_FIELDS = BUILTIN_KNOBS


def require_matplotlib() -> None:
    """``UsageError`` (exit code 2) naming the extra when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        from autotune.core.errors import UsageError

        raise UsageError(
            "autotune report draws its plots with matplotlib, which is not installed; "
            'install the report extra: pip install "autotune-train[report]"'
        ) from None


def _figure(width: float, height: float, *, rows: int = 1, cols: int = 1) -> Figure:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    fig.subplots(rows, cols, squeeze=False)
    return fig


def _plain_text(fig: Figure) -> Figure:
    """``fig`` with every text drawn as it is: a label is data (a preset's name, a race
    entry, a unit), so ``$`` is a dollar, never mathtext (whose parser raises on ``$\\x$``)."""
    from matplotlib.text import Text

    for text in fig.findobj(Text):
        text.set_parse_math(False)
    return fig


def figure_svg(fig: Figure, *, name: str) -> str:
    """The figure as an ``<svg>`` element for inlining: text drawn as paths (no font to
    fetch), ids salted with ``name`` so that several figures on one page do not clash."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context(
        {"svg.fonttype": "path", "svg.hashsalt": name, "text.parse_math": False}
    ):
        _plain_text(fig).savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    start = text.find("<svg")
    svg = text[start:] if start >= 0 else text
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)  # RDF names, no content
    # ids inside one figure are unique; prefixing them keeps figures apart on the page
    svg = re.sub(r'id="([^"]+)"', rf'id="{name}-\1"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", rf"url(#{name}-\1)", svg)
    svg = re.sub(r'xlink:href="#([^"]+)"', rf'xlink:href="#{name}-\1"', svg)
    return svg.replace("<svg ", f'<svg role="img" aria-label="{name}" ', 1)


def figure_png(fig: Figure, path: Any, *, dpi: int = 110) -> None:
    import matplotlib

    with matplotlib.rc_context({"text.parse_math": False}):
        _plain_text(fig).savefig(path, format="png", dpi=dpi, metadata={"Software": PNG_SOFTWARE})


def _kind(t: TrialRecord) -> Mapping[str, str] | None:
    """How a trial is drawn; None for one that ran no burst and is no infeasible config
    (skipped, or stopped at the study's gate: nothing to draw)."""
    if t.status == "skipped" or (t.status == "stopped" and not t.ran):
        return None
    if t.status == "stopped":
        return _STOPPED
    if t.state == "PRUNED" or t.status == "pruned":
        return _PRUNED
    if t.infeasible:
        return _INFEASIBLE
    if t.feasible:
        return _OK
    return _FAILED


def _shown(t: TrialRecord, kind: Mapping[str, str]) -> float:
    """Where a trial sits on a throughput axis: what it measured (a pruned trial: what it
    reached before it was stopped), else 0."""
    if kind in (_OK, _PRUNED, _STOPPED) and t.throughput is not None:
        return t.throughput
    return 0.0


def _gb(n: float | None) -> float | None:
    return None if n is None else n / 1e9


# -- the search history --------------------------------------------------------------------


def draw_history(ax: Axes, data: ReportData) -> None:
    """Throughput of every trial in order, the best so far as a step line; infeasible and
    failed trials drawn at 0, pruned and stopped ones at what they reached, each with its
    own marker; one skipped without a burst is not drawn."""
    trials = data.finished()
    groups: dict[str, tuple[Mapping[str, str], list[int], list[float]]] = {}
    for t in trials:
        kind = _kind(t)
        if kind is None:
            continue
        value = _shown(t, kind)
        entry = groups.setdefault(kind["label"], (kind, [], []))
        entry[1].append(t.number)
        entry[2].append(value)
    for kind, xs, ys in groups.values():
        ax.scatter(
            xs,
            ys,
            marker=kind["marker"],
            color=kind["color"],
            label=f"{kind['label']}: {len(xs)}",
            zorder=3,
        )
    best_x, best_y, best = [], [], 0.0
    for t in trials:
        if t.feasible and t.throughput is not None:
            best = max(best, t.throughput)
        best_x.append(t.number)
        best_y.append(best)
    if any(best_y):
        ax.step(best_x, best_y, where="post", color=_BEST, label="best so far", zorder=2)
    ax.set_xlabel("trial")
    ax.set_ylabel(data.unit)
    ax.set_title("Search history")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if trials:  # below the axes: the trials at 0 would hide behind a legend inside
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, fontsize="small")


def history_figure(data: ReportData) -> Figure:
    fig = _figure(8, 3.6)
    draw_history(fig.axes[0], data)
    return fig


# -- throughput against peak memory --------------------------------------------------------


# The planner's starts as the memory plot labels them: (role, label).
_STARTS = (
    ("quick-start", "quick start"),
    ("naive", "naive"),
    ("hand-tuned", "hand-tuned"),
    ("guess", "guess"),
    ("warm-start", "warm start"),
    ("shipped-preset", "shipped preset"),
)


def _labelled(data: ReportData) -> list[tuple[str, TrialRecord]]:
    """The trials labelled on the memory plot: the winner and the starts."""
    out: list[tuple[str, TrialRecord]] = []
    winner = data.winner()
    if winner is not None:
        out.append(("winner", winner))
    for role, label in _STARTS:
        t = data.by_role(role)
        if t is not None:
            out.append((label, t))
    return out


def draw_memory(ax: Axes, data: ReportData) -> None:
    """One point per trial: throughput against peak memory, the budget as a line, the
    winner, naive and hand-tuned starts labelled."""
    groups: dict[str, tuple[Mapping[str, str], list[float], list[float]]] = {}
    for t in data.finished():
        peak = _gb(t.peak_memory_bytes)
        if peak is None:
            continue
        kind = _kind(t)
        if kind is None:
            continue
        value = _shown(t, kind)
        entry = groups.setdefault(kind["label"], (kind, [], []))
        entry[1].append(peak)
        entry[2].append(value)
    for kind, xs, ys in groups.values():
        ax.scatter(xs, ys, marker=kind["marker"], color=kind["color"], label=kind["label"])
    budget = _gb(data.budget_bytes)
    if budget is not None:
        ax.axvline(budget, color="#d62728", linestyle="--", label=f"budget {budget:.3g} GB")
    for i, (label, t) in enumerate(_labelled(data)):
        peak = _gb(t.peak_memory_bytes)
        if peak is None:
            continue
        value = t.throughput if t.feasible and t.throughput is not None else 0.0
        ax.annotate(
            f"{label} #{t.number}" + ("" if t.feasible else f" ({t.status})"),
            (peak, value),
            xytext=(8, 10 + 12 * (i % 3)),
            textcoords="offset points",
            fontsize="small",
            arrowprops={"arrowstyle": "-", "color": "#555555"},
        )
        if label == "winner":
            ax.scatter([peak], [value], s=160, facecolors="none", edgecolors=_BEST)
    ax.set_xlabel("peak memory (GB)")
    ax.set_ylabel(data.unit)
    ax.set_title("Throughput against peak memory")
    ax.set_xlim(left=0)
    ax.set_ylim(0, ax.get_ylim()[1] * 1.15)  # room for the labels above the top point
    ax.grid(alpha=0.3)
    if groups or budget is not None:
        ax.legend(loc="best", fontsize="small")


def memory_figure(data: ReportData) -> Figure:
    fig = _figure(8, 3.8)
    draw_memory(fig.axes[0], data)
    return fig


def summary_png(data: ReportData, path: Any) -> None:
    """The two main plots side by side, one image for an issue or a chat."""
    fig = _figure(13, 4.2, cols=2)
    draw_history(fig.axes[0], data)
    draw_memory(fig.axes[1], data)
    fig.suptitle(data.title)
    figure_png(fig, path)


# -- each knob's effect ----------------------------------------------------------------------


def knob_values(trials: Sequence[TrialRecord]) -> dict[str, dict[str, list[float]]]:
    """Measured throughput per value of each knob that took more than one value among the
    trials measured within the budget: knob -> value (as text) -> throughputs."""
    out: dict[str, dict[str, list[float]]] = {}
    for t in trials:
        if not (t.feasible and t.ran and t.throughput is not None):
            continue
        fields = {k: t.config.get(k) for k in KNOB_FIELDS if k in t.config}
        fields.update(dict(t.config.get("knobs") or {}))
        for name, value in fields.items():
            out.setdefault(name, {}).setdefault(str(value), []).append(t.throughput)
    return {k: v for k, v in out.items() if len(v) > 1}


def _value_order(value: str) -> tuple[int, float, str]:
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def knobs_figure(data: ReportData) -> Figure | None:
    """One small panel per knob: every measured throughput at each of its values, the
    median as a bar. None when no knob took two values."""
    values = knob_values(data.trials)
    if not values:
        return None
    cols = min(4, len(values))
    rows = -(-len(values) // cols)
    fig = _figure(3.0 * cols, 2.6 * rows, rows=rows, cols=cols)
    for ax, (name, per_value) in zip(fig.axes, sorted(values.items()), strict=False):
        keys = sorted(per_value, key=_value_order)
        for i, key in enumerate(keys):
            ys = per_value[key]
            ax.scatter([i] * len(ys), ys, color=_OK["color"], alpha=0.6, s=18)
            ax.hlines(statistics.median(ys), i - 0.3, i + 0.3, color=_BEST, linewidth=2)
        ax.set_xticks(range(len(keys)), keys, fontsize="small")
        ax.set_title(name, fontsize="medium")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, axis="y")
    for ax in fig.axes[len(values) :]:
        ax.set_visible(False)
    fig.supylabel(data.unit)
    return fig


def importance_figure(importances: Mapping[str, float]) -> Figure:
    items = sorted(importances.items(), key=lambda kv: kv[1])
    fig = _figure(7, 0.5 + 0.35 * len(items))
    ax = fig.axes[0]
    ax.barh([k.removesuffix(".idx") for k, _ in items], [v for _, v in items], color=_OK["color"])
    ax.set_xlabel("importance (share of the throughput's variance)")
    ax.set_xlim(0, 1)
    ax.grid(alpha=0.3, axis="x")
    return fig


# -- where a step's time goes ---------------------------------------------------------------

# Each part of a step, in the order the bars stack them, with its colour and legend label.
STEP_PARTS = (
    ("data_wait", "#d62728", "data wait"),
    ("h2d", "#9467bd", "host-to-device copy"),
    ("forward", "#1f77b4", "forward"),
    ("backward", "#ff7f0e", "backward"),
    ("optimizer", "#2ca02c", "optimizer step"),
    ("rest", "#7f7f7f", "rest (Python, launches, sync)"),
)


def profile_figure(rows: Sequence[tuple[str, Mapping[str, float]]]) -> Figure:
    """One horizontal stacked bar per config (``(label, seconds per step by part)``, the
    first on top), all on one x axis in ms per step, the parts in ``STEP_PARTS`` order."""
    fig = _figure(8, 1.3 + 0.5 * len(rows))
    ax = fig.axes[0]
    ys = list(range(len(rows)))[::-1]
    left = [0.0] * len(rows)
    for part, color, label in STEP_PARTS:
        widths = [max(0.0, float(parts.get(part, 0.0))) * 1e3 for _, parts in rows]
        ax.barh(ys, widths, left=left, color=color, label=label, height=0.6)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(ys, [_short(label) for label, _ in rows], fontsize="small")
    for tick in ax.get_yticklabels():
        tick.set_parse_math(False)  # a label is data: "$" is a dollar, never mathtext
    ax.set_xlabel("ms per optimizer step")
    ax.set_xlim(0, max(left, default=0.0) * 1.05 or 1.0)
    ax.grid(alpha=0.3, axis="x")
    fig.legend(fontsize="small", ncols=3, loc="outside lower center")
    return fig


def _short(label: str, width: int = 40) -> str:
    return label if len(label) <= width else label[: width - 1] + "…"


# -- the finalists -----------------------------------------------------------------------------


def finalists_figure(entries: Sequence[Mapping[str, Any]], unit: str) -> Figure | None:
    """Each finalist's measurements (``samples``) as points, the median as a bar and the
    spread as an error bar; None when no entry has a measurement."""
    rows = [e for e in entries if _samples(e)]
    if not rows:
        return None
    fig = _figure(8, 0.9 + 0.45 * len(rows))
    ax = fig.axes[0]
    for i, entry in enumerate(rows):
        ys = _samples(entry)
        median = statistics.median(ys)
        ax.scatter(ys, [i] * len(ys), color=_OK["color"], alpha=0.6, s=20, zorder=3)
        ax.errorbar(
            [median], [i], xerr=[[median - min(ys)], [max(ys) - median]], color=_BEST, capsize=4
        )
        ax.scatter([median], [i], color=_BEST, marker="|", s=300, zorder=4)
    ax.set_yticks(range(len(rows)), [str(e.get("label", "?")) for e in rows], fontsize="small")
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    ax.set_xlim(left=0)
    ax.grid(alpha=0.3, axis="x")
    return fig


def _samples(entry: Mapping[str, Any]) -> list[float]:
    raw = entry.get("samples")
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        median = entry.get("median")
        return [float(median)] if isinstance(median, (int, float)) else []
    return [float(x) for x in raw if isinstance(x, (int, float))]
