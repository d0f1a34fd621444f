"""`autotune bench`: run one burst of one config and print what it measured.

The tool to check a single config by hand: the same isolated, timed burst a search runs
per trial (``autotune.burst.supervisor.run_burst``), printed as a table or as JSON. A config this
model or device cannot run is refused before any process starts (exit 2); a burst that
ends other than ``ok`` prints its figures, then its status and reason (exit 1).
torch and rich are imported inside the command, so ``autotune --help`` stays instant.
The config's flags (``--micro-batch``, ``--precision``, ``--omp-spin``...) are not written
here: one per knob of the registry (autotune/config/knobs.py), with its help and default.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import (
    DeviceOption,
    ModelArgOption,
    ModelOption,
    cli_command,
    print_json,
)
from autotune.core.errors import AutotuneError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.explain.breakdown import Breakdown
    from autotune.explain.verdict import StepVerdict

__all__ = [
    "ProfileOption",
    "bench",
    "check_burst_numbers",
    "config_options",
    "parse_knobs",
    "render",
]

ProfileOption = Annotated[
    bool,
    typer.Option(
        "--profile",
        help="Profile a few steps in a burst's extra steps, never among the timed ones: "
        "where a step's time goes and which limit it hits (search: the naive config's "
        "verdict, once it ran, picks the knobs refined first; after the race the naive "
        "config and the winner go into the preset's notes).",
    ),
]


def config_options(config_type: type | None = None) -> list[inspect.Parameter]:
    """One ``--flag`` per knob of the registry that has CLI help, in field order: its
    type, default and help from the entry (``KnobDef.cli_flag``, ``flag_default``)."""
    from autotune.config.knobs import registry
    from autotune.config.train_config import TrainConfig

    params = []
    for k in registry(config_type or TrainConfig):
        if not k.help:
            continue
        default = k.flag_default
        kind = k.type if default is not None or k.type == int | None else k.type | None
        option = typer.Option(k.cli_flag, help=k.help)
        params.append(
            inspect.Parameter(
                k.name,
                inspect.Parameter.KEYWORD_ONLY,
                default=default,
                annotation=Annotated[kind, option],
            )
        )
    return params


def _with_config_options(func: Callable[..., None]) -> Callable[..., None]:
    """Give ``func`` (whose ``**settings`` take the knobs) one option per knob, after its
    first parameter: Typer reads the signature, so the flags come from the registry."""
    signature = inspect.signature(func, eval_str=True)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    func.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[own[0], *config_options(), *own[1:]]
    )
    return func


@cli_command
@_with_config_options
def bench(
    model: ModelOption,
    *,
    knob: Annotated[
        list[str] | None,
        typer.Option("--knob", help="A model knob as name=value (repeatable): block_group=4."),
    ] = None,
    steps: Annotated[int, typer.Option(help="Timed optimizer steps.")] = 10,
    warmup: Annotated[int, typer.Option(help="Untimed warm-up steps (compilation).")] = 3,
    device: DeviceOption = None,
    budget: Annotated[
        str | None,
        typer.Option(
            "--budget",
            "-b",
            help="Memory budget, enforced: 8GB, 8GiB, 8000MB, or a fraction (0.5). "
            "Default: none beyond the device's own memory.",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds before the burst is killed.")] = 300.0,
    seed: Annotated[int, typer.Option(help="Seed of the model and the synthetic data.")] = 0,
    verify: Annotated[
        bool, typer.Option("--verify", help="Also run an eval step and save a checkpoint.")
    ] = False,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    profile: ProfileOption = False,
    model_arg: ModelArgOption = None,
    trace: Annotated[
        str | None,
        typer.Option(
            "--trace", help="With --profile: write the Chrome trace (opens in Perfetto) here."
        ),
    ] = None,
    **settings: Any,
) -> None:
    """Run one isolated training burst of one config and print what it measured."""
    check_burst_numbers(steps=steps, warmup=warmup, timeout=timeout, seed=seed)
    from autotune.config.checks import check_config
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import check_built_arguments
    from autotune.core import launch_env
    from autotune.core.signals import stop_signals_raise
    from autotune.core.units import parse_budget
    from autotune.machine.compile_cache import check_user_cache
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model, load_within, parse_model_args

    launch_env.check()
    check_user_cache()
    if trace is not None:
        _check_trace(trace)
    args = parse_model_args(model_arg or [])
    spec = load_within(model, timeout, lambda: load_model(model, args), limit="--timeout")
    check_built_arguments(spec)
    caps = probe().device(device)
    if settings.get("seq_len") is None:
        settings["seq_len"] = spec.seq_len  # the model's length unless --seq-len says
    config = TrainConfig(**settings, knobs=parse_knobs(knob or []))
    check_config(config, spec=spec, device=caps)
    budget_bytes = (
        parse_budget(budget, device_memory_bytes=caps.total_memory_bytes) if budget else None
    )
    with stop_signals_raise():  # SIGTERM: the burst's process ended, "stopped by SIGTERM"
        result = _run_with_progress(
            spec,
            config,
            caps,
            steps=steps,
            warmup=warmup,
            budget_bytes=budget_bytes,
            timeout_s=timeout,
            seed=seed,
            verify=verify,
            show_steps=not json_output,
            profile=profile or trace is not None,
            trace_path=str(Path(trace).resolve()) if trace else None,
        )
    _report(
        result,
        model=spec.name,
        size_name=spec.size_name,
        budget_bytes=budget_bytes,
        json_output=json_output,
    )


def check_burst_numbers(*, steps: int, warmup: int, timeout: float, seed: int | None) -> None:
    """Refuse a burst's numbers out of their bounds (``autotune.core.validator``), each named
    by its flag, before any process starts: a seed numpy takes, counts of 64 bits, a
    timeout within a year (NaN and infinity are none)."""
    from autotune.core.validator import COUNT, SEED, duration_problem, show

    numbers = (("--steps", steps, COUNT), ("--warmup", warmup, COUNT.at_least(0)))
    problems = [
        f"{flag} must be {wanted}, got {show(value)}"
        for flag, value, bound in (*numbers, ("--seed", seed, SEED))
        if value is not None and (wanted := bound.wanted(value))
    ]
    if wanted := duration_problem(timeout):
        problems.append(f"--timeout must be {wanted}, got {show(timeout)}")
    if problems:
        raise UsageError("; ".join(problems))


def _check_trace(trace: str) -> None:
    """The trace is written by the burst's process at its end, so a path it cannot take
    is refused before the burst: a folder there (torch replaced an empty one with the
    file), a device or a path ending with a slash (``check_output_path``), a folder that
    does not exist or cannot be written, and a file that is not a trace (a preset given
    by mistake became a 7 MB trace)."""
    from autotune.core.files import not_ours_problem, output_problem
    from autotune.explain.breakdown import is_chrome_trace

    if problem := output_problem(trace, example="trace.json", make_folders=False):
        raise UsageError(f"--trace {problem}")
    path = Path(trace).expanduser()
    if problem := not_ours_problem(path, is_chrome_trace, what="a Chrome trace", by="the trace"):
        raise UsageError(f"--trace {trace!r} {problem}")


def _run_with_progress(
    spec: ModelSpec,
    config: TrainConfig,
    caps: DeviceCaps,
    *,
    steps: int,
    warmup: int,
    budget_bytes: int | None,
    timeout_s: float,
    seed: int,
    verify: bool,
    show_steps: bool,
    profile: bool = False,
    trace_path: str | None = None,
) -> BurstResult:
    """The burst, under a spinner on stderr (with each timed step's time if
    ``show_steps``)."""
    from rich.console import Console

    from autotune.burst.result import CUDA_MIN_TIMED_S, CUDA_MIN_WARMUP_S
    from autotune.burst.supervisor import run_burst

    progress = Console(stderr=True, highlight=False)
    what = f"{spec.name} on {caps.device}: {warmup} warm-up + {steps} timed steps"
    if caps.device.startswith("cuda"):  # run_burst's CUDA minimum: more where steps are short
        what += f" (at least {CUDA_MIN_WARMUP_S:g} s + {CUDA_MIN_TIMED_S:g} s of them)"
    with progress.status(f"{what} (starting the trial process)", spinner="dots") as status:

        def on_step(index: int, seconds: float) -> bool:
            step = f"{index + 1}/{steps}" if index < steps else f"{index + 1}, past {steps}"
            status.update(f"{what} (timed step {step}: {seconds * 1e3:.1f} ms)")
            return True

        return run_burst(
            spec,
            config,
            steps=steps,
            warmup=warmup,
            budget_bytes=budget_bytes,
            timeout_s=timeout_s,
            device=caps.device,
            seed=seed,
            verify=verify,
            on_step=on_step if show_steps else None,
            device_caps=caps,
            profile=profile,
            trace_path=trace_path,
        )


def _report(
    result: BurstResult,
    *,
    model: str,
    size_name: str = "seq",
    budget_bytes: int | None,
    json_output: bool,
) -> None:
    """Print the result (a table, or JSON); a burst that is not ok is an error (exit 1)."""
    from rich.console import Console

    from autotune.core.units import format_bytes
    from autotune.explain.render import explain_result, explain_to_dict

    explained = explain_result(result, budget_bytes=budget_bytes)
    if json_output:
        data = {"model": model, "budget_bytes": budget_bytes, **result.to_dict()}
        if explained is not None:
            data["explain"] = explain_to_dict(*explained)
        print_json(_finite(data))
    else:
        console = Console(highlight=False)
        render(result, model=model, size_name=size_name, budget_bytes=budget_bytes, console=console)
        if explained is not None:
            _render_explained(*explained, console=console)
    if not result.ok:
        where = (
            f" (peak {format_bytes(result.peak_memory_bytes)})" if result.status == "oom" else ""
        )
        raise AutotuneError(f"burst {result.status}{where}: {result.reason}")


def _render_explained(breakdown: Breakdown, verdict: StepVerdict, *, console: Console) -> None:
    """Where the step's time goes, and the verdict with its evidence and knobs."""
    from rich.table import Table

    from autotune.explain.render import table_rows

    table = Table(title="where a step's time goes", title_justify="left", box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for label, value in table_rows(breakdown, verdict):
        table.add_row(label, value)
    console.print(table)


def parse_knobs(items: list[str]) -> dict[str, Any]:
    """``["block_group=4", "tie=true"]`` -> ``{"block_group": 4, "tie": True}``: each value
    read as ``train --set`` reads one (``overrides.parse_value``)."""
    from autotune.config.overrides import parse_value
    from autotune.core.validator import show

    knobs: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise UsageError(f"--knob expects name=value (e.g. block_group=4), got {item!r}")
        value = parse_value(text)
        if (key := name.strip()) in knobs:  # the last one silently won
            raise UsageError(
                f"--knob {key} is given twice ({show(knobs[key])} and {show(value)}); "
                "bench measures one value: keep one"
            )
        knobs[key] = value
    return knobs


def _finite(data: Any) -> Any:
    """JSON has no NaN or infinity: such floats (a diverged loss) become null."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


def render(
    result: BurstResult,
    *,
    model: str,
    size_name: str = "seq",
    budget_bytes: int | None,
    console: Console,
) -> None:
    """The human-readable form of a burst result; ``size_name`` names the sample size
    (``seq``, ``image``: the model spec's)."""
    from rich.table import Table

    from autotune.core.units import format_bytes

    def seconds(value: float | None, scale: float = 1.0, unit: str = "s") -> str:
        return "-" if value is None else f"{value * scale:.3f} {unit}"

    colour = "green" if result.ok else "red"
    table = Table(title=f"burst: {model}", title_justify="left", show_header=False, box=None)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row("status", f"[{colour}]{result.status}[/]")
    if result.reason:
        table.add_row("reason", result.reason)
    cfg = result.config
    knobs = ", ".join(f"{k}={v}" for k, v in dict(cfg.get("knobs", {})).items())
    table.add_row(
        "config",
        f"micro-batch {cfg.get('micro_batch')} x accum {cfg.get('grad_accum')}, "
        f"{size_name} {cfg.get('seq_len')}, {cfg.get('precision')}, compile {cfg.get('compile')}, "
        f"workers {cfg.get('num_workers')}" + (f", {knobs}" if knobs else ""),
    )
    table.add_row("device", result.device)
    if result.tokens_per_s is not None:
        table.add_row("tokens/s", f"{result.tokens_per_s:,.0f}")
    if result.samples_per_s is not None:
        table.add_row("samples/s", f"{result.samples_per_s:,.2f}")
    table.add_row(
        "step time",
        f"median {seconds(result.step_time_median_s, 1e3, 'ms')}, "
        f"p90 {seconds(result.step_time_p90_s, 1e3, 'ms')} "
        f"({result.timed_steps} timed steps)",
    )
    table.add_row(
        "warm-up",
        f"{seconds(result.warmup_s)} ({result.warmup_steps} steps)"
        + (f", compile {seconds(result.compile_s)}" if result.compile_s is not None else ""),
    )
    table.add_row("MFU", "-" if result.mfu is None else f"{result.mfu:.1%}")
    peak = format_bytes(result.peak_memory_bytes)
    if budget_bytes is not None:
        peak += f" of a {format_bytes(budget_bytes)} budget"
    table.add_row("peak memory", f"{peak} ({result.memory_source or 'not measured'})")
    if result.losses:
        table.add_row(
            "loss",
            f"{result.losses[0]:.4g} -> {result.losses[-1]:.4g} ({len(result.losses)} steps)",
        )
    if result.eval_loss is not None:
        table.add_row("eval loss", f"{result.eval_loss:.4g}")
    if result.checkpoint_bytes is not None:
        table.add_row("checkpoint", format_bytes(result.checkpoint_bytes))
    table.add_row(
        "overhead", f"{seconds(result.overhead_s)} (process start, imports, model build, data)"
    )
    table.add_row("wall", seconds(result.wall_s))
    console.print(table)
