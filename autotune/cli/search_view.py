"""What `autotune search` shows: one row per finished trial on stderr while it runs
(``LiveView``), then the summary on stdout (``render_result``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from autotune.core.units import format_figure

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from autotune.study import SearchEvent, SearchResult, TrialRecord

__all__ = ["LiveView", "render_result"]


def _fmt_tp(value: float | None) -> str:
    if value is None:
        return "-"
    return format_figure(value)


def _fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 60:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{seconds:.0f}s"


_STATUS_STYLE = {
    "ok": "green",
    "oom": "red",
    "over-budget": "red",
    "dominated": "magenta",
    "predicted": "magenta",
    "pruned": "yellow",
}


class LiveView:
    """One row per finished trial on stderr, with the best so far and what is left."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.header_done = False
        self.said_interrupted = False  # the search said what a Ctrl-C left in the study

    def __call__(self, event: SearchEvent) -> None:
        from rich.markup import escape

        if event.kind == "start":
            self.console.print(f"[bold]autotune search[/]: {escape(event.message)}")
        elif event.kind == "note":
            self.console.print(f"  {escape(event.message)}")
            self.said_interrupted |= event.message.startswith("interrupted:")
        elif event.kind == "verify":
            self._verified(event)
        elif event.trial is not None:
            self._trial(event, event.trial)

    def _verified(self, event: SearchEvent) -> None:
        from rich.markup import escape

        if event.trial is None:
            return
        if event.message:  # the round's figures come as a note after each round
            self.console.print(
                f"  [red]race: #{event.trial.number} cannot win[/]: {escape(event.message)}"
            )

    def _trial(self, event: SearchEvent, record: TrialRecord) -> None:
        from rich.markup import escape

        if not self.header_done:
            self.console.print(
                f"[bold]{'#':>4}  {'status':<11} {event.unit:>11} {'peak':>10}  config[/]"
            )
            self.header_done = True
        style = _STATUS_STYLE.get(record.status, "red")
        status = record.status + ("*" if record.duplicate_of is not None else "")
        best = event.best
        best_txt = f"best {_fmt_tp(best.throughput)} (#{best.number})" if best else "best -"
        left = []
        if event.trials_left is not None:
            left.append(f"{event.trials_left} trials")
        if event.time_left_s is not None:
            left.append(_fmt_s(event.time_left_s))
        detail = f"  ({escape(record.reason)})" if record.status not in ("ok",) else ""
        if record.role:
            detail = f"  ({record.role})" + detail
        self.console.print(
            f"{record.number:>4}  [{style}]{status:<11}[/] {_fmt_tp(record.throughput):>11} "
            f"{_fmt_bytes(record.peak_memory_bytes):>10}  {escape(record.summary())}"
            f"[dim]{detail} | {best_txt}, left {' '.join(left) or '-'}[/]"
        )


def _fmt_bytes(n: float | None) -> str:
    from autotune.core.units import format_bytes

    return format_bytes(n)


def render_result(result: SearchResult, console: Console) -> None:
    """The end-of-search summary: top configs, speedup, skips, where the preset went."""
    from rich.markup import escape

    from autotune.study.trials.records import counts_text

    counts = result.counts()
    console.print(
        f"[bold]Search finished[/] ({escape(result.stopped)}): {counts_text(counts)}; "
        f"{_fmt_s(result.wall_s)}; study {escape(result.study_name)!s} in {escape(result.storage)}"
    )
    if result.ledger is not None:
        console.print(escape(result.ledger.line()))
    console.print(_top_table(result))
    if result.race is not None:
        console.print(_race_table(result))
    _print_best_and_speedup(result, console)
    if result.skipped:
        console.print("[bold]Skipped or not kept[/]:")
        for reason, n in grouped_reasons(result.skipped):
            console.print(f"  {n} x {escape(reason)}")
    if result.preset_path:
        console.print(f"[bold]Preset written[/]: {escape(result.preset_path)}")
    for note in result.notes:
        console.print(escape(note))


_SECONDS = re.compile(r"(\d+(?:\.\d+)?) s\b")


def grouped_reasons(skipped: Mapping[str, int]) -> list[tuple[str, int]]:
    """Why configs were not kept, the most frequent first, reasons that differ only in
    their seconds told once with each figure's range: five "the time left for trials (N
    s) is less than ..." lines of 49, 59 and 66 s are one of "(49-66 s)". (``--json``
    keeps each reason as it was.)"""
    groups: dict[tuple[str, ...], list[tuple[list[str], int]]] = {}
    for reason, n in skipped.items():
        pieces = _SECONDS.split(reason)  # text, seconds, text, seconds, ..., text
        groups.setdefault(tuple(pieces[0::2]), []).append((pieces[1::2], n))
    out = []
    for texts, members in groups.items():
        columns = zip(*(seconds for seconds, _ in members), strict=True)
        ranges = [_seconds_range(column) for column in columns]
        told = "".join(
            text + (ranges[i] if i < len(ranges) else "") for i, text in enumerate(texts)
        )
        out.append((told, sum(n for _, n in members)))
    return sorted(out, key=lambda told_n: -told_n[1])


def _seconds_range(values: tuple[str, ...]) -> str:
    low, high = min(values, key=float), max(values, key=float)
    return f"{low} s" if float(low) == float(high) else f"{low}-{high} s"


def _top_table(result: SearchResult) -> Table:
    """The best configs of the search, with the naive baseline below them."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="Top configs", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column(result.unit, justify="right")
    table.add_column("step (s)", justify="right")
    table.add_column("peak", justify="right")
    table.add_column("config", ratio=1, overflow="fold")  # folded, never cut
    rows: list[TrialRecord] = list(result.top)
    if result.naive is not None and result.naive not in rows:
        rows.append(result.naive)
    for r in rows:
        label = f"{r.number}" + (
            " (naive)" if result.naive and r.number == result.naive.number else ""
        )
        step = f"{r.step_time_median_s:.3f}" if r.step_time_median_s else "-"
        table.add_row(
            label, _fmt_tp(r.throughput), step, _fmt_bytes(r.peak_memory_bytes), escape(r.summary())
        )
    return table


def _race_table(result: SearchResult) -> Table:
    """The finalist race: each config's median over the paired rounds, its spread, its
    ratio to naive (paired) and every round's figure. Where no round counts, a config that
    stands on its quiet trial shows that trial's figure, as the best line does."""
    from rich.markup import escape
    from rich.table import Table

    race = result.race
    assert race is not None
    title = f"Finalist race ({race.rounds} interleaved round{'s' if race.rounds != 1 else ''}"
    if not race.paired:  # the deadline cut every round, or load came or went in each
        title += "; none counts, see the notes"
    table = Table(title=title + ")", title_justify="left")
    # The config (its label, then its whole summary below it) takes the width the figures
    # leave, and folds rather than cuts: in 80 columns a cut summary ("block_group…") hid
    # what told the winner from the runner-up.
    table.add_column("config", ratio=1, overflow="fold")
    for name in (f"median {result.unit}", "spread", "vs naive", "rounds"):
        table.add_column(name, justify="right", overflow="fold")
    for e in race.entrants:
        ratio = race.ratio_to_naive(e)
        label = e.label + (" [bold]winner[/]" if e is race.winner else "")
        rounds = " ".join(_fmt_tp(t) if t else "-" for t in e.throughputs)
        median, spread = _fmt_tp(e.median), f"{e.spread:.1%}" if e.spread is not None else "-"
        if e.stand_in is not None:
            median, spread = f"{_fmt_tp(e.record.throughput)} (trial)", "-"
        table.add_row(
            f"{label}\n[dim]{escape(e.record.summary())}[/]"
            + (f" [red]({escape(e.problem)})[/]" if e.problem else "")
            + (f" [dim]({escape(e.eliminated)})[/]" if e.eliminated else ""),
            median,
            spread,
            f"{ratio.estimate:.2f}x" if ratio is not None else "-",
            rounds,
        )
    return table


def _print_best_and_speedup(result: SearchResult, console: Console) -> None:
    """The race's winner, its speedup over the naive config (or why there is none) and its
    margin over the runner-up, from the race's paired rounds."""
    from rich.markup import escape

    race = result.race
    if result.best is not None and race is not None:
        burst = race.winner.typical_burst()
        peak = burst.peak_memory_bytes if burst is not None else None
        figure = f"race median {_fmt_tp(race.winner.median)}"
        if race.winner.stand_in is not None:  # no race round counted: its trial's figure
            figure = f"not raced, its trial's {_fmt_tp(race.winner.record.throughput)}"
        console.print(
            f"[bold]Best[/]: trial #{result.best.number} ({escape(result.best.summary())}); "
            f"{figure} {result.unit}, "
            f"peak {_fmt_bytes(peak)} of {_fmt_bytes(result.budget_bytes)}"
        )
    if race is not None and (race.speedup is not None or race.speedup_reason):
        # the figure with its evidence, or "not measured (why)": never a made-up 1.00x
        naive = f" ({escape(result.naive.summary())})" if result.naive is not None else ""
        if race.speedup is not None and not race.speedup_reason:
            naive += f", paired over {race.speedup.rounds} round(s)"
        console.print(f"[bold]Speedup over naive[/]{naive}: {escape(race.qualified_speedup())}")
        if race.margin is not None and race.runner_up is not None:
            console.print(
                f"Margin over the runner-up {escape(race.runner_up.label)}: "
                f"{race.margin.describe()}"
                + (" [dim](within noise)[/]" if race.margin.low <= 1.0 else "")
            )
    elif result.naive is not None and (race is not None or result.verified is not None):
        # (a worker that left the race to another has neither: its notes say so)
        console.print(
            f"Naive config ({escape(result.naive.summary())}): {result.naive.status} "
            f"({escape(result.naive.reason)}), so no speedup figure"
        )
