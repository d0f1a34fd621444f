"""`autotune search`: find the fastest config of a model within a memory budget.

A thin layer over ``autotune.study.search``: it reads the options, shows live progress
on stderr (one row per trial, the best so far, what is left), then the summary on stdout
(or the ``SearchResult`` as JSON with ``--json``). optuna, torch and rich are imported
inside the command, so ``autotune --help`` stays instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli._common import DeviceOption, ModelOption, cli_command, print_json

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.study import SearchEvent, SearchResult, TrialRecord

__all__ = ["render_result", "search"]


@cli_command
def search(
    model: ModelOption,
    budget: Annotated[
        str,
        typer.Option(
            "--budget",
            "-b",
            help="Memory budget: 8GB, 8GiB, 8000MB, or a fraction of the device (0.5).",
        ),
    ],
    device: DeviceOption = None,
    global_batch: Annotated[
        int | None,
        typer.Option(
            "--global-batch",
            help="Samples per optimizer step, kept fixed (default: the model's).",
        ),
    ] = None,
    seq_len: Annotated[
        str | None,
        typer.Option(
            "--seq-len",
            help="One length (128) or a range (64-256: its powers of two are searched).",
        ),
    ] = None,
    trials: Annotated[
        int | None,
        typer.Option(
            help="Measured trials (bursts) in the study, earlier runs included. "
            "Default, with no --timeout either: 30 within 8 minutes.",
        ),
    ] = None,
    timeout: Annotated[
        str | None,
        typer.Option(help="Time limit for the trials, e.g. 10m, 600s, 1h."),
    ] = None,
    steps: Annotated[int, typer.Option(help="Timed optimizer steps per burst.")] = 4,
    warmup: Annotated[
        int | None,
        typer.Option(help="Untimed warm-up steps per burst (default: 1 on CPU, 3 on CUDA)."),
    ] = None,
    storage: Annotated[
        str | None,
        typer.Option(
            help="Optuna storage URL (sqlite:///x.db, postgresql://..., journal:PATH). "
            "Default: sqlite:///autotune_runs/<study>/study.db.",
        ),
    ] = None,
    study: Annotated[
        str | None,
        typer.Option(help="Study name (default: from model, device, budget, batch, length)."),
    ] = None,
    output: Annotated[
        str, typer.Option("--output", "-o", help="Where to write the winning preset.")
    ] = "best.yaml",
    seed: Annotated[int, typer.Option(help="Seed of the sampler and of the bursts.")] = 0,
    knob: Annotated[
        list[str] | None,
        typer.Option(
            "--knob",
            help="Restrict or fix a knob: NAME=V1,V2 (repeatable), e.g. precision=bf16,fp32, "
            "compile=off, micro_batch=4,8, block_group=4.",
        ),
    ] = None,
    objective: Annotated[
        str,
        typer.Option(
            help="throughput (steady-state tokens/s) or time-to-train (charges compile "
            "time over --train-steps)."
        ),
    ] = "throughput",
    train_steps: Annotated[
        int | None,
        typer.Option("--train-steps", help="Length of the run, for --objective time-to-train."),
    ] = None,
    warm_start: Annotated[
        str | None,
        typer.Option(
            "--warm-start",
            help="A preset whose config (and its neighbours) are tried first.",
        ),
    ] = None,
    burst_timeout: Annotated[
        str,
        typer.Option("--burst-timeout", help="Time limit of one burst, e.g. 300s or 5m."),
    ] = "300s",
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the result as JSON on stdout.")
    ] = False,
) -> None:
    """Search the fastest training config within a memory budget and write it as a preset.

    Each trial runs one short, isolated burst of real optimizer steps. Rerunning the same
    command resumes the study; Ctrl-C leaves it consistent.
    """
    from rich.console import Console

    from autotune.study import search as run_search
    from autotune.units import parse_duration

    err = Console(stderr=True, highlight=False)
    view = _LiveView(err)
    warm = None
    if warm_start is not None:
        from autotune.preset import resolve_preset

        warm = resolve_preset(warm_start)
    timeout_s = None if timeout is None else parse_duration(timeout, what="--timeout")
    burst_timeout_s = parse_duration(burst_timeout, what="--burst-timeout")
    try:
        result = run_search(
            model,
            budget=budget,
            device=device,
            global_batch=global_batch,
            seq_len=seq_len,
            trials=trials,
            timeout=timeout_s,
            steps=steps,
            warmup=warmup,
            storage=storage,
            study=study,
            output=output,
            seed=seed,
            knobs=list(knob or []),
            objective=objective,
            train_steps=train_steps,
            warm_start=warm,
            burst_timeout=burst_timeout_s,
            progress=view,
        )
    except KeyboardInterrupt:
        err.print("[yellow]interrupted[/]: finished trials are saved; rerun to resume")
        raise
    if json_output:
        print_json(result.to_dict())
        return
    render_result(result, Console(highlight=False))


def _fmt_tp(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


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


class _LiveView:
    """One row per finished trial on stderr, with the best so far and what is left."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.header_done = False

    def __call__(self, event: SearchEvent) -> None:
        from rich.markup import escape

        c = self.console
        if event.kind == "start":
            c.print(f"[bold]autotune search[/]: {escape(event.message)}")
            return
        if event.kind == "note":
            c.print(f"  {escape(event.message)}")
            return
        if event.kind == "verify":
            if event.trial is None:
                return
            if event.message:
                c.print(
                    f"  [red]verification of #{event.trial.number} failed[/]: "
                    f"{escape(event.message)}"
                )
            elif event.verify is not None:
                tp = (
                    event.verify.tokens_per_s
                    if event.unit == "tokens/s"
                    else event.verify.samples_per_s
                )
                c.print(
                    f"  [green]verified #{event.trial.number}[/]: {_fmt_tp(tp)} {event.unit}, "
                    f"peak {_fmt_bytes(event.verify.peak_memory_bytes)}"
                )
            return
        record = event.trial
        if record is None:
            return
        if not self.header_done:
            c.print(f"[bold]{'#':>4}  {'status':<11} {event.unit:>11} {'peak':>10}  config[/]")
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
        c.print(
            f"{record.number:>4}  [{style}]{status:<11}[/] {_fmt_tp(record.throughput):>11} "
            f"{_fmt_bytes(record.peak_memory_bytes):>10}  {escape(record.summary())}"
            f"[dim]{detail} | {best_txt}, left {' '.join(left) or '-'}[/]"
        )


def _fmt_bytes(n: float | None) -> str:
    from autotune.units import format_bytes

    return format_bytes(n)


def render_result(result: SearchResult, console: Console) -> None:
    """The end-of-search summary: top configs, speedup, skips, where the preset went."""
    from rich.markup import escape
    from rich.table import Table

    counts = result.counts()
    console.print(
        f"[bold]Search finished[/] ({escape(result.stopped)}): {counts['measured']} measured, "
        f"{counts['infeasible']} infeasible, {counts['pruned']} pruned, {counts['failed']} "
        f"failed, {counts['duplicates']} repeats; {_fmt_s(result.wall_s)}; study "
        f"{escape(result.study_name)!s} in {escape(result.storage)}"
    )
    table = Table(title="Top configs", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column(result.unit, justify="right")
    table.add_column("step (s)", justify="right")
    table.add_column("peak", justify="right")
    table.add_column("config")
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
    console.print(table)
    if result.best is not None and result.verified is not None:
        v = result.verified
        tp = v.tokens_per_s if result.unit == "tokens/s" else v.samples_per_s
        console.print(
            f"[bold]Best[/]: trial #{result.best.number} ({escape(result.best.summary())}); "
            f"verified {_fmt_tp(tp)} {result.unit}, peak {_fmt_bytes(v.peak_memory_bytes)} "
            f"of {_fmt_bytes(result.budget_bytes)}"
        )
    if result.speedup is not None and result.naive is not None:
        console.print(
            f"[bold]Speedup over naive[/] ({escape(result.naive.summary())}, "
            f"{_fmt_tp(result.naive.throughput)} {result.unit}): {result.speedup:.2f}x"
        )
    elif result.naive is not None:
        console.print(
            f"Naive config ({escape(result.naive.summary())}): {result.naive.status} "
            f"({escape(result.naive.reason)}), so no speedup figure"
        )
    if result.skipped:
        console.print("[bold]Skipped or not kept[/]:")
        for reason, n in sorted(result.skipped.items(), key=lambda kv: -kv[1]):
            console.print(f"  {n} x {escape(reason)}")
    if result.preset_path:
        console.print(f"[bold]Preset written[/]: {escape(result.preset_path)}")
    for note in result.notes:
        console.print(escape(note))
