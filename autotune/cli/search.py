"""`autotune search`: find the fastest config of a model within a memory budget.

A thin layer over ``autotune.study.search``: it reads the options, shows live progress
on stderr (one row per trial, the best so far, what is left), then the summary on stdout
(or the ``SearchResult`` as JSON with ``--json``). optuna, torch and rich are imported
inside the command, so ``autotune --help`` stays instant.

Its flags give the fields of ``search()``'s option records (``autotune.study.session.options``):
``FLAGS`` names the flag of each field by the field's path (``limits.timeout``:
``--timeout``), the one table that fills the records from the flags' values and that
``flag_of`` reads to show a problem of a field as its flag. The typer signature is
written out, not generated from the records as ``bench``'s knob flags are: the command's
own options (``--budget``, ``--json``, ``--report``, ``--devices``, ``--cpu-workers``,
``--model-arg``) sit between the records' in ``--help``, some flags are shared with other
commands (``--device``, ``--profile``), and several take another form than their field
(``--knob`` texts, ``--finish STUDY``, ``--warm-start`` a preset's name); the signature
lists them in one place, and a test holds it and ``FLAGS`` to every field.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import (
    DeviceOption,
    ModelArgOption,
    ModelOption,
    cli_command,
    model_with_args,
    print_json,
    state,
)
from autotune.cli.bench import ProfileOption
from autotune.cli.search_view import LiveView, render_result
from autotune.core.errors import UsageError
from autotune.core.signals import StopSignal, stop_signals_raise

if TYPE_CHECKING:
    from pathlib import Path

    from rich.console import Console

    from autotune.contract.spec import ModelSpec
    from autotune.study import SearchResult

__all__ = ["FLAGS", "flag_of", "search"]


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
    str | None,
    typer.Option(help="Time limit of the whole command from its start, race included: 10m, 1h."),
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
        'pip install "autotune-train[report]".',
    ),
]
FinalistsOption = Annotated[
    int | None,
    typer.Option(help="How many of the search's best configs race the naive config (default 3)."),
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


# The flag of each option record's field that a flag gives, by the field's path; the
# flag's parameter is its name with underscores (``--knob``: ``knob``).
FLAGS: dict[str, str] = {
    "scope.global_batch": "--global-batch",
    "scope.seq_len": "--seq-len",
    "scope.knobs": "--knob",
    "scope.objective": "--objective",
    "scope.train_steps": "--train-steps",
    "machine.device": "--device",
    "machine.nproc_per_node": "--nproc-per-node",
    "limits.trials": "--trials",
    "limits.timeout": "--timeout",
    "limits.steps": "--steps",
    "limits.warmup": "--warmup",
    "limits.burst_timeout": "--burst-timeout",
    "race.finalists": "--finalists",
    "race.race_rounds": "--race-rounds",
    "study.storage": "--storage",
    "study.study": "--study",
    "study.seed": "--seed",
    "study.warm_start": "--warm-start",
    "study.worker": "--worker",
    "study.finish": "--finish",
    "output.output": "--output",
    "output.profile": "--profile",
}
# The fields the command fills without a flag of their own, and those only Python gives.
FILLED = ("limits.since", "output.progress")  # the process's start; the live view
PYTHON_ONLY = (
    "machine.hardware",
    "machine.burst_fn",
    "machine.watch",
    "race.race_steps",
    "study.runs_dir",
    "study.n_startup_trials",
)
_LIBRARY_DEFAULT = ("race.finalists", "race.race_rounds")  # left out: the library's default
_DERIVED = {  # the records' figures read from a field: their flag is the field's
    "limits.time_limit_s": "limits.timeout",
    "limits.trial_limit": "limits.trials",
    "limits.burst_timeout_s": "limits.burst_timeout",
}


def flag_of(path: str) -> str | None:
    """The flag that gives the option field at ``path`` (``limits.time_limit_s``:
    ``--timeout``), or None for a field no flag gives."""
    return FLAGS.get(_DERIVED.get(path, path))


# A message from beyond the records (a resumed study's set-up, the model's limits) names a
# field by its bare name only: first, or after these words; or where a resumed study's
# set-up differs ("(steps: the study has 4, now 8; seed: ...").
_FIELD = re.compile(
    r"(?:^|(?<=cannot read )|(?<=needs )|(?:(?<=\()|(?<=; ))(?=\w+: the study has ))("
    + "|".join(path.split(".")[1] for path in FLAGS)
    + r")\b"
)
_NEW_STUDY = re.compile(r"\b((?:a new|another) study name)\b")  # the flag that gives one


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
    model_arg: ModelArgOption = None,
) -> None:
    """Search the fastest training config within a memory budget and write it as a preset.

    Each trial runs one short, isolated burst of real optimizer steps. Rerunning the same
    command resumes the study; Ctrl-C, SIGTERM or SIGHUP leaves it consistent.
    """
    flags = dict(locals())  # the flags' values, by parameter name
    from rich.console import Console

    from autotune.core import launch_env

    launch_env.check()
    if devices is not None or cpu_workers is not None:
        raise typer.Exit(_launch_workers(devices or "", cpu_workers, study=study))
    study = _finished_study(study, finish)

    from autotune.study import search as run_search

    err = Console(stderr=True, highlight=False)
    if report:  # before the search, not after it
        from autotune.report.plots import require_matplotlib

        require_matplotlib()
    spec = model_with_args(model, model_arg)
    flags.update(  # the flags whose fields take another form
        study=study, knob=list(knob or []), finish=finish is not None,
        warm_start=_warm_start(warm_start),
    )  # fmt: skip
    options = _options(flags, since=state.started, progress=(view := LiveView(err)))
    result = _searched(lambda: run_search(spec, budget=budget, **options), err, view)
    explained = _after_search(result, spec, err, report=report, profile=profile)
    if json_output:
        print_json({**result.to_dict(), **({"profile": explained} if profile else {})})
        return
    render_result(result, Console(highlight=False))


def _searched(run: Callable[[], SearchResult], err: Console, view: LiveView) -> SearchResult:
    """``run()`` (the search) with SIGTERM and SIGHUP stopping it as Ctrl-C does, each
    stop said once: a signal's exit is 128 + its number, Ctrl-C's 130 (the search's own
    line names the study it left, when the stop came during the trials)."""
    with stop_signals_raise():  # also while the stop is said: a second one is the boundary's
        try:
            return run()
        except UsageError as exc:  # the library names an option's field: show its flag
            if type(exc) is not UsageError:  # a ConfigError lists its fields with their paths
                raise
            raise UsageError(_with_flags(str(exc))) from None
        except StopSignal as stop:
            err.print(f"[yellow]stopped by {stop}[/]: finished trials are saved; rerun to resume")
            raise typer.Exit(128 + stop.signum) from None
        except KeyboardInterrupt:
            if not view.said_interrupted:
                err.print("[yellow]interrupted[/]: finished trials are saved; rerun to resume")
            raise typer.Exit(130) from None


def _after_search(
    result: SearchResult, model: str | ModelSpec, err: Console, *, report: bool, profile: bool
) -> list[dict[str, Any]]:
    """``--profile``'s breakdowns (into the preset's notes), then ``--report``'s page."""
    explained: list[dict[str, Any]] = []
    if profile:
        from autotune.study.session.profile_found import profile_into_preset

        explained = profile_into_preset(result, model, console=err)
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
    from autotune.study.storage.workers import plan_workers, run_workers

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


def _options(flags: Mapping[str, Any], **filled: Any) -> dict[str, Any]:
    """``search()``'s option records from the flags' values (``flags``, by parameter name)
    and the fields the command fills (``filled``); a bad value's message names its flag."""
    from autotune.study import search_options
    from autotune.study.session.options import SearchOptionsError

    values = dict(filled)
    for path, flag in FLAGS.items():
        value = flags[flag.removeprefix("--").replace("-", "_")]
        if value is not None or path not in _LIBRARY_DEFAULT:
            values[path.split(".")[1]] = value
    try:
        return search_options(**values)
    except SearchOptionsError as exc:
        raise SearchOptionsError([_with_flags(p.text, p.fields) for p in exc.found]) from None


def _with_flags(message: str, fields: tuple[str, ...] | None = None) -> str:
    """``message`` with the option fields it names shown as their flags: ``fields``, the
    paths of those it names by their names (each replaced where the message first names
    it); None: a message that carries no paths, whose fields ``_FIELD`` finds."""
    if fields is None:
        from autotune.study.session.options import field_paths

        paths = field_paths()
        message = _FIELD.sub(lambda m: flag_of(paths[m[1]]) or m[1], message)
    for path in fields or ():
        name, flag = path.split(".")[1], flag_of(path)
        if flag is not None:
            message = re.sub(rf"\b{name}\b", flag, message, count=1)
    return _NEW_STUDY.sub(rf"\1 ({flag_of('study.study')} NAME)", message)
