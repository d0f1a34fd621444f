"""The report page: one self-contained HTML file (inline CSS and SVG, no script, nothing
fetched from a network), one ``<section>`` per question a reader asks of a search.

The markup lives in ``templates/report.html.j2`` (its building blocks in
``templates/_blocks.html.j2``), rendered by a Jinja2 environment with autoescaping and
strict undefined names: every preset or study string reaches the page as data, escaped by
the template, never pasted into markup (principle 6). This module gathers what each section
says: ``render_html(data)`` builds the page; each ``_section_*`` function returns the
section's blocks (paragraphs, tables, figures) and says in a sentence why it is empty when
it has nothing to show. ``race_html(race, unit)`` renders a preset's finalist race from its
plain mapping. The blocks themselves are ``blocks.py``'s; the section on where a step's time
goes (shown only for a profiled search) is ``steps.py``'s.
"""

from __future__ import annotations

import functools
import shlex
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from autotune.core.units import format_bytes
from autotune.report import plots
from autotune.report.blocks import Block, Table, Text
from autotune.report.blocks import fmt as _fmt
from autotune.report.blocks import make_figure as _figure
from autotune.report.blocks import note as _note
from autotune.report.blocks import table as _table
from autotune.report.steps import STEPS_SECTION, section_steps
from autotune.study.trials.records import (
    TrialRecord,
    counts_text,
    distinct_best,
    memory_model_note,
    summarize_config,
    trial_counts,
)

if TYPE_CHECKING:
    from autotune.report.data import ReportData

__all__ = ["SECTIONS", "finalist_entries", "race_html", "render_html"]

# The sections, in page order: (id, heading).
SECTIONS = (
    ("summary", "Summary"),
    ("history", "Search history"),
    ("memory", "Throughput against peak memory"),
    ("knobs", "Each knob's effect"),
    ("finalists", "Finalists"),
    ("hardware", "Hardware"),
    ("config", "The winner's config against naive"),
    ("reproduce", "Reproduce"),
)

_TEMPLATES = Path(__file__).parent / "templates"


@functools.lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    """The one environment every page and fragment is rendered with."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(_TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def render_html(data: ReportData) -> str:
    """The whole page as text."""
    shown = list(SECTIONS)
    if data.profile:  # only a search run with --profile says where a step's time goes
        shown.insert(shown.index(("finalists", "Finalists")) + 1, STEPS_SECTION)
    sections = [
        {"id": sid, "title": title, "blocks": _RENDERERS[sid](data)} for sid, title in shown
    ]
    template = _environment().get_template("report.html.j2")
    return template.render(title=data.title, notes=data.notes, sections=sections)


# -- the sections ------------------------------------------------------------------------------


def _section_summary(data: ReportData) -> list[Block]:
    rows: list[tuple[str, Any]] = [("model", data.model), ("device", data.device)]
    if data.budget_bytes:
        rows.append(("memory budget", format_bytes(data.budget_bytes)))
    if data.study_name:
        rows.append(("study", f"{data.study_name} in {data.storage}"))
    if data.preset_path:
        rows.append(("preset", data.preset_path))
    done = data.finished()
    if done:  # in the search summary's words and figures
        counts = trial_counts(done)
        said = f"{counts['trials']} finished; {counts_text(counts)}"
        if counts["skipped"]:
            said += f"; {counts['skipped']} skipped without a burst"
        rows.append(("trials", said))
    if data.ledger is not None:  # the study's last search
        rows.append(("where the time went", data.ledger.line().removeprefix("Time: ")))
    headline = _headline(data)
    out: list[Block] = [Text(headline, style="big")] if headline else []
    return [*out, _table(None, rows)]


def _headline(data: ReportData) -> str:
    unit = data.unit
    if data.preset is not None and data.preset.measured.throughput is not None:
        value = data.preset.measured.throughput[0]
        return f"The preset measured {_fmt(value)} {unit}" + _speedup_said(data)
    winner = data.winner()
    if winner is None:
        return "No config ran successfully within the budget: there is no winner."
    return f"Best trial #{winner.number}: {_fmt(winner.throughput)} {unit}" + _speedup_said(data)


def _speedup_said(data: ReportData) -> str:
    """The headline's end: ``, 2.31x the naive config (95% interval ...).``, or ``;
    speedup: not measured (why).`` when the race had no evidence for one."""
    from autotune.preset.figures import speedup_clause

    text = _speedup_text(data)
    return "." if text is None else speedup_clause(text) + "."


def _speedup_text(data: ReportData) -> str | None:
    """The speedup with its evidence (``preset.figures``, the one rule for every output),
    or None without a naive figure."""
    from autotune.preset.figures import race_speedup

    if data.race is not None and (data.race.get("speedup_reason") or _speedup(data)):
        baseline = None if data.preset is None else data.preset.baseline
        return race_speedup(data.race, None if baseline is None else baseline.speedup)
    speedup = _speedup(data)
    return None if not speedup else f"{speedup:.2f}x"


def _speedup(data: ReportData) -> float | None:
    race = data.race
    if race and isinstance(race.get("speedup"), (int, float)):
        return float(race["speedup"])
    if race and race.get("speedup_reason"):  # the race had no evidence: no figure
        return None
    baseline = None if data.preset is None else data.preset.baseline
    if baseline is not None and baseline.speedup is not None:
        return baseline.speedup
    winner, naive = data.winner(), data.by_role("naive")
    if winner and naive and naive.feasible and naive.throughput and winner.throughput:
        return winner.throughput / naive.throughput
    return None


def _section_history(data: ReportData) -> list[Block]:
    if not data.finished():
        return [_note("No trials to show: the study has none, or this page has no study.")]
    caption = (
        "Every trial in the order it ran; the line is the best so far. Infeasible trials "
        "(out of memory, over the budget, or skipped as such) and failed ones sit at 0, "
        "pruned ones (clearly slower) and ones the time limit stopped at what they reached, "
        "each with its own marker; a trial skipped without a burst is in the table only."
    )
    return [_figure(plots.history_figure(data), "history", caption), _trial_table(data)]


def _trial_table(data: ReportData) -> Table:
    rows = []
    for t in data.finished():
        rows.append(
            (
                t.number,
                t.status + (f" ({t.role})" if t.role else ""),
                t.throughput,
                format_bytes(t.peak_memory_bytes) if t.peak_memory_bytes else "-",
                format_bytes(t.predicted_peak_bytes) if t.predicted_peak_bytes else "-",
                "-" if t.prediction_error_pct is None else f"{t.prediction_error_pct:+.1f}%",
                t.summary(),
                "; ".join(x for x in (t.reason, t.at_edge and f"at the edge: {t.at_edge}") if x),
            )
        )
    header = ["#", "status", data.unit, "peak", "predicted", "error", "config", "reason"]
    return _table(header, rows, details=f"All {len(rows)} trials")


def _section_memory(data: ReportData) -> list[Block]:
    if not any(t.peak_memory_bytes for t in data.finished()):
        return [_note("No trial recorded its peak memory, so there is nothing to plot.")]
    caption = (
        "One point per trial with a measured peak; the dashed line is the budget. "
        "The winner is circled; the naive and hand-tuned starts are labelled."
    )
    model = memory_model_note(data.finished())
    extra = [_note(model[0].upper() + model[1:])] if model else []
    return [_figure(plots.memory_figure(data), "memory", caption), *extra]


def _section_knobs(data: ReportData) -> list[Block]:
    parts: list[Block] = []
    if data.importances:
        parts.append(
            _figure(plots.importance_figure(data.importances), "importance", data.importance_note)
        )
    else:
        parts.append(
            _note(data.importance_note or "Parameter importances need the study's trials.")
        )
    fig = plots.knobs_figure(data)
    if fig is None:
        parts.append(_note("No knob took two values among the measured trials."))
    else:
        caption = (
            "The measured throughput at each value of each knob (trials within the budget); "
            "the bar is the median. Other knobs vary too, so read it as a tendency."
        )
        parts.append(_figure(fig, "knobs", caption))
    return parts


def finalist_entries(data: ReportData) -> list[dict[str, Any]]:
    """Without a race: the best distinct configs and naive, each with what the study
    measured of it (its trial, and its verification burst where one ran)."""
    verified: dict[int, float] = {}
    for attempt in data.verify:
        value = attempt.get("samples_per_s" if data.unit == "samples/s" else "tokens_per_s")
        if isinstance(attempt.get("trial"), int) and isinstance(value, (int, float)):
            verified[attempt["trial"]] = float(value)
    chosen: list[TrialRecord] = distinct_best(data.trials)[:4]
    naive = data.by_role("naive")
    if naive is not None and naive.feasible and naive not in chosen:
        chosen.append(naive)
    winner = data.winner()
    entries = []
    for t in chosen:
        samples = [x for x in (t.throughput, verified.get(t.number)) if x is not None]
        label = f"#{t.number}" + (" winner" if winner and t.number == winner.number else "")
        label += " naive" if t.role == "naive" else ""
        entries.append(
            {"label": label, "trial": t.number, "config": t.summary(), "samples": samples}
        )
    return entries


def race_html(race: Mapping[str, Any], unit: str) -> str:
    """A preset's finalist race (``rounds``, ``winner``, ``speedup`` with its interval,
    ``margin`` with its interval, ``entries``) as a sentence, a table and a plot. Tolerant of
    missing fields: it renders what is there."""
    template = _environment().get_template("fragment.html.j2")
    return template.render(items=_race_blocks(race, unit))


def _race_blocks(race: Mapping[str, Any], unit: str) -> list[Block]:
    """The blocks of ``race_html``."""
    unit = str(race.get("unit") or unit)
    entries = [e for e in race.get("entries") or () if isinstance(e, Mapping)]
    said = []
    if race.get("winner") is not None:
        said.append(f"winner {race['winner']}")
    if isinstance(race.get("speedup"), (int, float)):
        said.append(f"{race['speedup']:.2f}x naive{_interval(race.get('speedup_interval'), 'x')}")
        if race.get("speedup_reason") or race.get("interval_reason"):
            said.append(f"({race.get('speedup_reason') or race.get('interval_reason')})")
    elif race.get("speedup_reason"):
        said.append(f"speedup over naive not measured ({race['speedup_reason']})")
    if isinstance(race.get("margin"), (int, float)):
        said.append(
            f"{race['margin']:+.1%} over the runner-up"
            + _interval(race.get("margin_interval"), "%")
        )
    rounds = race.get("rounds")
    head = (
        f"The race: {rounds} interleaved rounds of fresh bursts"
        if isinstance(rounds, int)
        else "The race"
    )
    out: list[Block] = [Text(head + (": " + "; ".join(said) if said else "") + ".", style="big")]
    load_said = _race_load(race)
    if load_said:
        out.append(_note(load_said))
    rows = []
    for e in entries:
        samples = plots._samples(e)
        spread = e.get("spread")
        rows.append(
            (
                e.get("label", "?"),
                "-" if e.get("trial") is None else f"#{e['trial']}",
                e.get("config", ""),
                e.get("median"),
                f"{spread:.1%}" if isinstance(spread, (int, float)) else "-",
                len(samples),
                f"{e['ratio_to_naive']:.2f}x"
                if isinstance(e.get("ratio_to_naive"), (int, float))
                else "-",
                "; ".join(str(e.get(k) or "") for k in ("problem", "eliminated") if e.get(k)),
            )
        )
    columns = ["finalist", "trial", "config", f"median {unit}", "spread", "rounds", "vs naive"]
    out.append(_table([*columns, "problem"], rows))
    fig = plots.finalists_figure(entries, unit)
    if fig is not None:
        out.append(
            _figure(
                fig,
                "race",
                "Each round's measurement; the bar is the median, the whiskers the range.",
            )
        )
    return out


def _race_load(race: Mapping[str, Any]) -> str:
    """What the machine watch saw during the race, and which rounds were left out for it;
    "" when the race recorded no load or a quiet one."""
    from autotune.study.session.watch import Load

    busy = [i + 1 for i, b in enumerate(race.get("busy_rounds") or ()) if b is True]
    said = []
    if busy:
        total = len(race.get("busy_rounds") or ())
        which = ", ".join(str(i) for i in busy)
        said.append(
            f"Round(s) {which} ran while the machine was busy and were left out of the figures."
            if len(busy) < total
            else "Every round ran while the machine was busy: these figures may not hold "
            "on a quiet machine."
        )
    load = race.get("load")
    if isinstance(load, Mapping):
        try:
            seen = Load.from_dict(load)
        except ValueError:
            seen = None
        if seen is not None and seen.busy:
            said.append(f"The machine watch saw: {seen.describe()}.")
    return " ".join(said)


def _interval(value: Any, kind: str) -> str:
    if not (isinstance(value, Sequence) and len(value) == 2):
        return ""
    lo, hi = value
    if not all(isinstance(x, (int, float)) for x in (lo, hi)):
        return ""
    if kind == "%":
        return f" (interval {lo:+.1%} to {hi:+.1%})"
    return f" (interval {lo:.2f}x to {hi:.2f}x)"


def _section_finalists(data: ReportData) -> list[Block]:
    preset = _preset_figures(data) if data.preset is not None else []
    if data.race:
        return [*_race_blocks(data.race, data.unit), *preset]
    entries = finalist_entries(data)
    if not entries:
        if preset:
            return preset
        return [_note("No config ran successfully within the budget, so there are no finalists.")]
    rows = []
    for e in entries:
        samples = e["samples"]
        median = statistics.median(samples)
        spread = (max(samples) - min(samples)) / median if len(samples) > 1 and median else None
        rows.append(
            (
                e["label"],
                e["config"],
                median,
                f"{spread:.1%}" if spread is not None else "-",
                " / ".join(_fmt(x) for x in samples),
            )
        )
    out: list[Block] = [
        _note(
            "This search recorded no race: each finalist's figures are its search trial and, "
            "where it was verified, its longer verification burst."
        ),
        _table(["finalist", "config", f"median {data.unit}", "spread", "measurements"], rows),
    ]
    fig = plots.finalists_figure(entries, data.unit)
    if fig is not None:
        out.append(_figure(fig, "finalists", "Each measurement; the bar is the median."))
    return [*out, *preset]


def _preset_figures(data: ReportData) -> list[Block]:
    preset = data.preset
    assert preset is not None
    m, b = preset.measured, preset.baseline
    rows: list[tuple[str, Any, Any]] = [
        ("tokens/s", m.tokens_per_s, None if b is None else b.tokens_per_s),
        ("samples/s", m.samples_per_s, None if b is None else b.samples_per_s),
        ("peak memory", format_bytes(m.peak_memory_bytes) if m.peak_memory_bytes else "-", "-"),
        ("step time (median, s)", m.step_time_median_s, "-"),
    ]
    speedup = _speedup_text(data)
    table = _table(["", "preset", "naive"], rows)
    said = f"Speedup over naive: {speedup}." if speedup else "No naive figure to compare."
    return [Text("The preset's measurement", style="h3"), table, Text(said)]


def _section_hardware(data: ReportData) -> list[Block]:
    if data.preset is None:
        return [
            _note(
                f"The study records the device ({data.device}) but not the machine; the preset "
                "a search writes carries the full fingerprint."
            )
        ]
    fp = data.preset.fingerprint
    generation = f"{fp.cpu_generation}, " if fp.cpu_generation else ""
    rows = [
        ("device", fp.describe()),
        ("memory", format_bytes(fp.memory_bytes)),
        ("compute capability", fp.compute_capability or "-"),
        ("driver / CUDA", f"{fp.driver_version or '-'} / {fp.cuda_version or '-'}"),
        ("CPU", f"{fp.cpu_model} ({generation}{fp.cpu_cores} cores)"),
        ("torch", fp.torch_version),
        ("autotune", fp.autotune_version),
        ("measured", data.preset.created),
    ]
    return [_table(None, rows)]


def _flat(config: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in config.items() if k != "knobs"}
    out.update({f"knobs.{k}": v for k, v in (config.get("knobs") or {}).items()})
    return out


def _section_config(data: ReportData) -> list[Block]:
    winner, naive = data.winner_config(), data.naive_config()
    if winner is None:
        return [_note("There is no winner, so no config to show.")]
    if naive is None:
        return [
            _note("No naive config ran, so the winner is shown alone."),
            _table(["field", "winner"], sorted(_flat(winner).items())),
        ]
    w, n = _flat(winner), _flat(naive)
    keys = sorted(set(w) | set(n), key=lambda k: (w.get(k) == n.get(k), k))
    rows = [(k, n.get(k, "-"), w.get(k, "-")) for k in keys]
    classes = ["same" if w.get(k) == n.get(k) else "changed" for k in keys]
    changed = classes.count("changed")
    size = "seq" if data.preset is None else data.preset.task.size_name
    summary = f"{summarize_config(naive, size)}  ->  {summarize_config(winner, size)}"
    return [
        Text(f"{changed} fields changed: ", code=summary),
        _table(["field", "naive", "winner"], rows, classes=classes),
    ]


def _section_reproduce(data: ReportData) -> list[Block]:
    lines = []
    preset = shlex.quote(data.preset_path or "best.yaml")
    if data.preset_path is None:
        lines.append("# this study's preset: the file its search wrote (--output, best.yaml)")
    lines.append(f"autotune presets check {preset}     # measure the preset on this machine")
    lines.append(f"autotune train --preset {preset}    # train with it")
    if data.storage and data.storage.startswith(("sqlite:", "postgresql", "mysql")):
        lines.append(f"optuna-dashboard {data.storage}    # browse the study")
    if data.study_name:
        lines.append(f"autotune report {shlex.quote(data.study_name)}    # this page")
    return [Text("\n".join(lines), style="pre")]


# Each section's blocks, by the section's id.
_RENDERERS: dict[str, Callable[[ReportData], list[Block]]] = {
    "summary": _section_summary,
    "history": _section_history,
    "memory": _section_memory,
    "knobs": _section_knobs,
    "finalists": _section_finalists,
    "hardware": _section_hardware,
    "config": _section_config,
    "reproduce": _section_reproduce,
    "steps": section_steps,
}
