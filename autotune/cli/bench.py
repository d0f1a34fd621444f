"""`autotune bench`: run one burst of one config and print what it measured.

The tool to check a single config by hand: the same isolated, timed burst a search runs
per trial (``autotune.burst.supervisor.run_burst``), printed as a table or as JSON. A config this
model or device cannot run is refused before any process starts (exit 2); a burst that
ends other than ``ok`` prints its figures, then its status and reason (exit 1).
torch and rich are imported inside the command, so ``autotune --help`` stays instant.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli._common import DeviceOption, ModelOption, cli_command, print_json
from autotune.core.errors import AutotuneError, UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps

__all__ = ["bench", "parse_knobs", "render"]


@cli_command
def bench(
    model: ModelOption,
    micro_batch: Annotated[int, typer.Option("--micro-batch", help="Samples per forward.")] = 8,
    grad_accum: Annotated[
        int, typer.Option("--grad-accum", help="Micro-batches per optimizer step.")
    ] = 1,
    seq_len: Annotated[
        int | None, typer.Option("--seq-len", help="Sequence length (default: the model's).")
    ] = None,
    precision: Annotated[str, typer.Option(help="fp32, tf32, bf16 or fp16.")] = "fp32",
    compile_mode: Annotated[
        str,
        typer.Option(
            "--compile",
            help="torch.compile: off, default, reduce-overhead, max-autotune, "
            "max-autotune-no-cudagraphs.",
        ),
    ] = "off",
    workers: Annotated[int, typer.Option("--workers", help="DataLoader worker processes.")] = 0,
    prefetch_factor: Annotated[
        int | None, typer.Option("--prefetch-factor", help="Batches each worker loads ahead.")
    ] = None,
    persistent_workers: Annotated[
        bool, typer.Option("--persistent-workers", help="Keep DataLoader workers alive.")
    ] = False,
    pin_memory: Annotated[
        bool, typer.Option("--pin-memory", help="Pinned host memory (CUDA only).")
    ] = False,
    fused_optimizer: Annotated[
        bool, typer.Option("--fused-optimizer", help="The fused AdamW kernel.")
    ] = False,
    cudnn_benchmark: Annotated[
        bool, typer.Option("--cudnn-benchmark", help="cuDNN autotuning (CUDA only).")
    ] = False,
    channels_last: Annotated[
        bool,
        typer.Option(
            "--channels-last", help="Model and image inputs channels-last (convolutional models)."
        ),
    ] = False,
    expandable_segments: Annotated[
        bool,
        typer.Option(
            "--expandable-segments",
            help="The CUDA caching allocator's expandable segments (CUDA only).",
        ),
    ] = False,
    omp_spin: Annotated[
        bool,
        typer.Option(
            "--omp-spin",
            help="torch's CPU threads spin between operations: OMP_WAIT_POLICY=ACTIVE (CPU only).",
        ),
    ] = False,
    activation_checkpointing: Annotated[
        bool, typer.Option("--activation-checkpointing", help="Recompute activations.")
    ] = False,
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
) -> None:
    """Run one isolated training burst of one config and print what it measured."""
    from autotune.config.train_config import TrainConfig, check_config
    from autotune.core.units import parse_budget
    from autotune.machine.hardware import probe
    from autotune.models.registry import load_model

    _check_counts(steps=steps, warmup=warmup, timeout=timeout)
    spec = load_model(model)
    caps = probe().device(device)
    config = TrainConfig(
        micro_batch=micro_batch,
        grad_accum=grad_accum,
        seq_len=seq_len if seq_len is not None else spec.seq_len,
        precision=precision,
        activation_checkpointing=activation_checkpointing,
        compile=compile_mode,
        num_workers=workers,
        pin_memory=pin_memory,
        prefetch_factor=prefetch_factor,
        persistent_workers=persistent_workers,
        fused_optimizer=fused_optimizer,
        cudnn_benchmark=cudnn_benchmark,
        channels_last=channels_last,
        expandable_segments=expandable_segments,
        omp_spin=omp_spin,
        knobs=parse_knobs(knob or []),
    )
    check_config(config, spec=spec, device=caps)
    budget_bytes = (
        parse_budget(budget, device_memory_bytes=caps.total_memory_bytes) if budget else None
    )
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
    )
    _report(
        result,
        model=spec.name,
        size_name=spec.size_name,
        budget_bytes=budget_bytes,
        json_output=json_output,
    )


def _check_counts(*, steps: int, warmup: int, timeout: float) -> None:
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    if warmup < 0:
        raise UsageError(f"--warmup must be 0 or more, got {warmup}")
    if timeout <= 0:
        raise UsageError(f"--timeout must be positive, got {timeout}")


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
) -> BurstResult:
    """The burst, under a spinner on stderr (with each timed step's time if
    ``show_steps``)."""
    from rich.console import Console

    from autotune.burst.supervisor import run_burst

    progress = Console(stderr=True, highlight=False)
    what = f"{spec.name} on {caps.device}: {warmup} warm-up + {steps} timed steps"
    with progress.status(f"{what} (starting the trial process)", spinner="dots") as status:

        def on_step(index: int, seconds: float) -> bool:
            status.update(f"{what} (timed step {index + 1}/{steps}: {seconds * 1e3:.1f} ms)")
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

    if json_output:
        print_json(_finite({"model": model, "budget_bytes": budget_bytes, **result.to_dict()}))
    else:
        render(
            result,
            model=model,
            size_name=size_name,
            budget_bytes=budget_bytes,
            console=Console(highlight=False),
        )
    if not result.ok:
        where = (
            f" (peak {format_bytes(result.peak_memory_bytes)})" if result.status == "oom" else ""
        )
        raise AutotuneError(f"burst {result.status}{where}: {result.reason}")


def parse_knobs(items: list[str]) -> dict[str, Any]:
    """``["block_group=4", "tie=true"]`` -> ``{"block_group": 4, "tie": True}`` (YAML scalars)."""
    import yaml

    knobs: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise UsageError(f"--knob expects name=value (e.g. block_group=4), got {item!r}")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        knobs[name.strip()] = value
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
