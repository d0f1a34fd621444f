"""`autotune search`: find the fastest config of a model within a memory budget.

A thin layer over ``autotune.study.search``: it reads the options, shows live progress
on stderr (one row per trial, the best so far, what is left), then the summary on stdout
(or the ``SearchResult`` as JSON with ``--json``). optuna, torch and rich are imported
inside the command, so ``autotune --help`` stays instant.
"""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import DeviceOption, ModelOption, cli_command, print_json
from autotune.cli.bench import ProfileOption
from autotune.core.errors import UsageError
from autotune.core.units import format_figure
from autotune.explain.found import profile_into_preset

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console
    from rich.table import Table

    from autotune.study import SearchEvent, SearchResult, TrialRecord

__all__ = ["render_result", "search"]


# The options of `autotune search`, spelled once.
BudgetOption = Annotated[
    str,
    typer.Option(
        "--budget",
        "-b",
        help="Memory budget: 8GB, 8GiB, 8000MB, or a fraction of the device (0.5).",
    ),
]
GlobalBatchOption = Annotated[
    int | None,
    typer.Option(
        "--global-batch",
        help="Samples per optimizer step, kept fixed (default: the model's).",
    ),
]
SeqLenOption = Annotated[
    str | None,
    typer.Option(
        "--seq-len",
        help="One length (128) or a range (64-256: its powers of two are searched).",
    ),
]
TrialsOption = Annotated[
    int | None,
    typer.Option(
        help="Measured trials (bursts) in the study, earlier runs included. "
        "Default, with no --timeout either: up to 30 within 5 2/3 minutes.",
    ),
]
TimeoutOption = Annotated[
    str | None, typer.Option(help="Time limit of the whole search, race included: 10m, 1h.")
]
StepsOption = Annotated[int, typer.Option(help="Timed optimizer steps per burst.")]
WarmupOption = Annotated[
    int | None,
    typer.Option(help="Untimed warm-up steps per burst (default: 1 on CPU, 3 on CUDA)."),
]
StorageOption = Annotated[
    str | None,
    typer.Option(
        help="Optuna storage URL (sqlite:///x.db, postgresql://..., journal:PATH). "
        "Default: sqlite:///autotune_runs/<study>/study.db.",
    ),
]
StudyOption = Annotated[
    str | None,
    typer.Option(help="Study name (default: from model, device, budget, batch, length)."),
]
OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="Where to write the winning preset.")
]
SeedOption = Annotated[int, typer.Option(help="Seed of the sampler and of the bursts.")]
KnobOption = Annotated[
    list[str] | None,
    typer.Option(
        "--knob",
        help="Restrict or fix a knob: NAME=V1,V2 (repeatable), e.g. precision=bf16,fp32, "
        "compile=off, micro_batch=4,8, block_group=4.",
    ),
]
ObjectiveOption = Annotated[
    str,
    typer.Option(
        help="throughput (steady-state tokens/s) or time-to-train (charges compile "
        "time over --train-steps)."
    ),
]
TrainStepsOption = Annotated[
    int | None,
    typer.Option("--train-steps", help="Length of the run, for --objective time-to-train."),
]
WarmStartOption = Annotated[
    str | None,
    typer.Option(
        "--warm-start",
        help="A preset whose config (and its neighbours) are tried first.",
    ),
]
BurstTimeoutOption = Annotated[
    str,
    typer.Option("--burst-timeout", help="Time limit of one burst, e.g. 300s or 5m."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
ReportOption = Annotated[
    bool,
    typer.Option(
        "--report",
        help="Also write the report page beside the preset (best.yaml: best.html); needs "
        'pip install "autotune[report]".',
    ),
]
FinalistsOption = Annotated[
    int | None,
    typer.Option(
        help="How many of the search's best configs race naive and the expert start (default 3)."
    ),
]
RaceRoundsOption = Annotated[
    int | None,
    typer.Option(
        "--race-rounds",
        help="Interleaved rounds of the finalist race (default 2; more narrow the interval).",
    ),
]
NprocOption = Annotated[
    int,
    typer.Option(
        "--nproc-per-node",
        help="Processes per burst (one per GPU; gloo on CPU): with more than 1 each burst "
        "runs under torchrun and the search adds the DDP/FSDP settings; the preset "
        "records them and autotune train launches torchrun itself.",
    ),
]

WorkerOption = Annotated[
    bool,
    typer.Option(
        "--worker",
        help="Join the other workers of this study (other devices, other machines, one "
        "--storage): each config is measured once, --trials counts all workers' trials, "
        "one worker runs the race and writes the preset.",
    ),
]
FinishOption = Annotated[
    str | None,
    typer.Option(
        "--finish",
        metavar="STUDY",
        help="Run no trials: wait for the workers of STUDY, then race its trials and "
        "write the preset (with the workers' other options).",
    ),
]
DevicesOption = Annotated[
    str | None,
    typer.Option(
        "--devices",
        help="One worker per device, all on one study: cuda:0,cuda:1 or all (every GPU).",
    ),
]
CpuWorkersOption = Annotated[
    int | None,
    typer.Option(
        "--cpu-workers",
        help="N workers on the CPU, each pinned to its own 1/N of the cores (workers "
        "sharing cores would measure each other, so a CPU runs one by default).",
    ),
]


# The flag of each option field, for the library's messages (which name the field): the
# field's name with dashes (``knobs``: ``--knob``).
_FLAGS = {
    name: "--knob" if name == "knobs" else "--" + name.replace("_", "-")
    for name in (
        "global_batch", "seq_len", "knobs", "objective", "train_steps", "device",
        "nproc_per_node", "trials", "timeout", "steps", "warmup", "burst_timeout",
        "finalists", "race_rounds", "storage", "study", "seed", "warm_start", "output",
    )
}  # fmt: skip
# Where a problem of the option records names a field: first, or after these words.
_FIELD = re.compile(r"(?:^|(?<=cannot read )|(?<=needs ))(" + "|".join(_FLAGS) + r")\b")


@cli_command
def search(
    model: ModelOption,
    budget: BudgetOption,
    device: DeviceOption = None,
    global_batch: GlobalBatchOption = None,
    seq_len: SeqLenOption = None,
    trials: TrialsOption = None,
    timeout: TimeoutOption = None,
    steps: StepsOption = 4,
    warmup: WarmupOption = None,
    storage: StorageOption = None,
    study: StudyOption = None,
    output: OutputOption = "best.yaml",
    seed: SeedOption = 0,
    knob: KnobOption = None,
    objective: ObjectiveOption = "throughput",
    train_steps: TrainStepsOption = None,
    warm_start: WarmStartOption = None,
    burst_timeout: BurstTimeoutOption = "300s",
    json_output: JsonOption = False,
    report: ReportOption = False,
    finalists: FinalistsOption = None,
    race_rounds: RaceRoundsOption = None,
    nproc_per_node: NprocOption = 1,
    worker: WorkerOption = False,
    finish: FinishOption = None,
    devices: DevicesOption = None,
    cpu_workers: CpuWorkersOption = None,
    profile: ProfileOption = False,
) -> None:
    """Search the fastest training config within a memory budget and write it as a preset.

    Each trial runs one short, isolated burst of real optimizer steps. Rerunning the same
    command resumes the study; Ctrl-C, SIGTERM or SIGHUP leaves it consistent.
    """
    from rich.console import Console

    if devices is not None or cpu_workers is not None:
        raise typer.Exit(_launch_workers(devices or "", cpu_workers, study=study))
    study = _finished_study(study, finish)

    from autotune.study import search as run_search

    err = Console(stderr=True, highlight=False)
    if report:  # before the search, not after it
        from autotune.report.plots import require_matplotlib

        require_matplotlib()
    options = _options(
        scope={"global_batch": global_batch, "seq_len": seq_len, "knobs": list(knob or []),
               "objective": objective, "train_steps": train_steps},
        machine={"device": device, "nproc_per_node": nproc_per_node},
        limits={"trials": trials, "timeout": timeout, "steps": steps, "warmup": warmup,
                "burst_timeout": burst_timeout},
        race=_given(finalists=finalists, race_rounds=race_rounds),  # else the library's
        study={"storage": storage, "study": study, "seed": seed, "worker": worker,
               "finish": finish is not None, "warm_start": _warm_start(warm_start)},
        output={"output": output, "progress": (view := _LiveView(err)), "profile": profile},
    )  # fmt: skip
    restore_signals = _stop_signals_as_interrupt()
    try:
        result = run_search(model, budget=budget, **options)
    except UsageError as exc:  # the library names an option's field: show its flag
        if type(exc) is not UsageError:  # a ConfigError lists its fields with their paths
            raise
        raise UsageError(_with_flags(str(exc))) from None
    except StopSignal as stop:
        err.print(f"[yellow]stopped by {stop}[/]: finished trials are saved; rerun to resume")
        raise typer.Exit(128 + stop.signum) from None
    except KeyboardInterrupt:  # once: the search's own line names the study, when it came
        if not view.said_interrupted:
            err.print("[yellow]interrupted[/]: finished trials are saved; rerun to resume")
        raise typer.Exit(130) from None
    finally:
        restore_signals()
    explained = _after_search(result, model, err, report=report, profile=profile)
    if json_output:
        print_json({**result.to_dict(), **({"profile": explained} if profile else {})})
        return
    render_result(result, Console(highlight=False))


def _after_search(
    result: SearchResult, model: str, err: Console, *, report: bool, profile: bool
) -> list[dict[str, Any]]:
    """``--profile``'s breakdowns (into the preset's notes), then ``--report``'s page."""
    explained = profile_into_preset(result, model, console=err) if profile else []
    if report and result.preset_path:
        from autotune.report import page_beside, write_report

        page = page_beside(result.preset_path)
        write_report(result.preset_path, out=page)
        err.print(f"report written: {page}")
    return explained


def _finished_study(study: str | None, finish: str | None) -> str | None:
    """The study ``--finish STUDY`` names (which ``--study``, if given, must name too)."""
    if finish is not None and study is not None and study != finish:
        raise UsageError(f"--finish {finish!r} names another study than --study {study!r}")
    return finish if finish is not None else study


def _launch_workers(devices: str, cpu_workers: int | None, *, study: str | None) -> int:
    """``--devices``/``--cpu-workers``: this command again once per device, as workers of
    one study; their progress goes to autotune_runs/workers/<study>/worker-N.log."""
    import sys
    from pathlib import Path

    from autotune.machine.hardware import probe
    from autotune.study.workers import plan_workers, run_workers

    slots = plan_workers(devices, probe(), cpu_workers=cpu_workers)
    args = _without(sys.argv[sys.argv.index("search") + 1 :], "--devices", "--cpu-workers")
    if any(a in ("--device", "--worker") or a.startswith("--device=") for a in args):
        raise UsageError("--devices and --cpu-workers choose each worker's --device themselves")
    logs = Path("autotune_runs") / "workers" / (study or "default")
    typer.echo(f"{len(slots)} workers on {', '.join(s.device for s in slots)}; logs in {logs}")
    return run_workers([sys.executable, "-m", "autotune", "search", *args], slots, logs=logs)


def _without(args: list[str], *flags: str) -> list[str]:
    """``args`` without ``flags`` and their values (``--flag V`` or ``--flag=V``)."""
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in flags:
            skip = True
        elif not any(arg.startswith(f"{flag}=") for flag in flags):
            kept.append(arg)
    return kept


class StopSignal(KeyboardInterrupt):
    """SIGTERM or SIGHUP, taking Ctrl-C's path through the search: the running trial is
    marked failed, its burst's process group ended, the study left consistent."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop_signals_as_interrupt() -> Callable[[], None]:
    """Until the returned function is called, SIGTERM and SIGHUP (a scheduler, a closed
    terminal) raise ``StopSignal`` as Ctrl-C raises KeyboardInterrupt, unless the parent
    ignored them (``nohup``)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum: int, frame: Any) -> None:
        raise StopSignal(signum)

    from autotune.core.signals import STOP_SIGNALS

    sigs = [  # Ctrl-C raises by itself; a signal the parent ignored (nohup) stays ignored
        sig
        for sig in STOP_SIGNALS
        if sig != signal.SIGINT and signal.getsignal(sig) is not signal.SIG_IGN
    ]
    old = {sig: signal.signal(sig, handler) for sig in sigs}

    def restore() -> None:
        for sig, previous in old.items():
            signal.signal(sig, previous)

    return restore


def _warm_start(reference: str | None) -> Path | None:
    """The preset file a ``--warm-start`` reference names (a path or a preset's name),
    read once here: a file that is no preset is refused before the study is opened (an
    empty one made the study's database first)."""
    if reference is None:
        return None
    from autotune.preset import load_preset, resolve_preset

    path = resolve_preset(reference)
    load_preset(path)
    return path


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


def _options(**fields: dict[str, Any]) -> dict[str, Any]:
    """``search()``'s option records from the flags' values (``fields``: record -> field ->
    value); a bad value's message names its flag."""
    from autotune.study import search_options
    from autotune.study.options import SearchOptionsError

    try:
        return search_options(**{k: v for values in fields.values() for k, v in values.items()})
    except SearchOptionsError as exc:
        raise SearchOptionsError([_with_flags(p) for p in exc.problems]) from None


def _with_flags(message: str) -> str:
    """A library message with the option field it names shown as its flag."""
    return _FIELD.sub(lambda m: _FLAGS[m[1]], message)


def _given(**options: Any) -> dict[str, Any]:
    """The options the user gave (the rest keep the library's defaults)."""
    return {name: value for name, value in options.items() if value is not None}


class _LiveView:
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

    counts = result.counts()
    console.print(
        f"[bold]Search finished[/] ({escape(result.stopped)}): {counts['ran']} trials ran, "
        f"{counts['measured']} measured, {counts['infeasible']} infeasible, {counts['pruned']} "
        f"pruned, {counts['failed']} failed, {counts['duplicates']} repeats; "
        f"{_fmt_s(result.wall_s)}; study {escape(result.study_name)!s} in {escape(result.storage)}"
    )
    console.print(_top_table(result))
    if result.race is not None:
        console.print(_race_table(result))
    _print_best_and_speedup(result, console)
    if result.skipped:
        console.print("[bold]Skipped or not kept[/]:")
        for reason, n in sorted(result.skipped.items(), key=lambda kv: -kv[1]):
            console.print(f"  {n} x {escape(reason)}")
    if result.preset_path:
        console.print(f"[bold]Preset written[/]: {escape(result.preset_path)}")
    for note in result.notes:
        console.print(escape(note))


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
    ratio to naive (paired) and every round's figure."""
    from rich.markup import escape
    from rich.table import Table

    race = result.race
    assert race is not None
    table = Table(title=f"Finalist race ({race.rounds} interleaved rounds)", title_justify="left")
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
        table.add_row(
            f"{label}\n[dim]{escape(e.record.summary())}[/]"
            + (f" [red]({escape(e.problem)})[/]" if e.problem else "")
            + (f" [dim]({escape(e.eliminated)})[/]" if e.eliminated else ""),
            _fmt_tp(e.median),
            f"{e.spread:.1%}" if e.spread is not None else "-",
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
        console.print(
            f"[bold]Best[/]: trial #{result.best.number} ({escape(result.best.summary())}); "
            f"race median {_fmt_tp(race.winner.median)} {result.unit}, "
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
