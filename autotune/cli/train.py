"""`autotune train`: the full run with a preset's config, real data, checkpoints and logs.

Single process::

    autotune train --preset best.yaml [--data corpus/] [--max-steps 2000]

Several GPUs or machines (DistributedDataParallel; the preset's global batch is kept)::

    torchrun --nproc-per-node 4 -m autotune train --preset best.yaml

Exit codes: 0 finished; 1 the run failed (out of memory, a non-finite loss); 2 bad input
(flags, preset, data, a checkpoint that does not fit); 130 / 143 stopped by SIGINT /
SIGTERM after saving a checkpoint (continue with ``--resume auto``).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from autotune.cli._common import cli_command
from autotune.errors import UsageError

__all__ = ["train"]

DEFAULT_OUT_ROOT = Path("autotune_runs") / "train"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"


def _rank_device(device: str) -> str:
    """The device this process trains on: under torchrun on CUDA, ``cuda:LOCAL_RANK``."""
    if device.startswith("cuda") and int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:
        return f"cuda:{int(os.environ.get('LOCAL_RANK', '0') or 0)}"
    return device


def _warn(text: str) -> None:
    if int(os.environ.get("RANK", "0") or 0) == 0:
        typer.echo(f"warning: {text}", err=True)


@cli_command
def train(
    preset: Annotated[
        str | None,
        typer.Option(
            "--preset", help="A preset file or the name of one (see `autotune presets list`)."
        ),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Train a model without a preset (fp32, micro-batch = the model's global "
            "batch): a built-in name, pkg.module:attr or path/to/file.py:attr.",
        ),
    ] = None,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            help="Language models: a text file, a folder of *.txt/*.md, or JSONL with a "
            '"text" field (default: the Python docs shipped with CPython). pointer-gen: '
            'JSONL of {"source", "summary"}. text-regressor: CSV with text, numeric '
            "columns and a target.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Run folder (default: ./autotune_runs/train/<preset or model>)."
        ),
    ] = None,
    max_steps: Annotated[
        int | None,
        typer.Option("--max-steps", help="Optimizer steps (overrides the preset's steps/epochs)."),
    ] = None,
    lr: Annotated[float | None, typer.Option("--lr", help="Peak learning rate.")] = None,
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="Override a field: config.micro_batch=4, config.knobs.block_group=2, "
            "training.warmup_steps=50 (repeatable).",
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            help="'auto' (the latest checkpoint in the run folder, or a fresh start if there "
            "is none) or a checkpoint file or folder.",
        ),
    ] = None,
    on_oom: Annotated[
        str,
        typer.Option(
            "--on-oom",
            help="fail: save and stop with advice; adapt: halve the micro-batch, double the "
            "accumulation (same global batch) and go on.",
        ),
    ] = "fail",
    device: Annotated[
        str | None,
        typer.Option("--device", help="cpu, cuda or cuda:N (default: the preset's kind)."),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", help="Run a preset even where its recorded memory may not fit."),
    ] = False,
    eval_interval: Annotated[
        int | None, typer.Option("--eval-interval", help="Evaluate every N steps.")
    ] = None,
    text_column: Annotated[
        str, typer.Option("--text-column", help="text-regressor CSV: the text column.")
    ] = "text",
    target_column: Annotated[
        str, typer.Option("--target-column", help="text-regressor CSV: the target column.")
    ] = "target",
    json_logs: Annotated[
        bool,
        typer.Option("--json-logs", help="Print one JSON record per log line on stdout."),
    ] = False,
) -> None:
    """Train with a preset's tuned config: real data, eval, checkpoints, resume, DDP."""
    import dataclasses

    from autotune.config import TrainConfig, check_config
    from autotune.hardware import probe
    from autotune.models import load_model
    from autotune.preset import (
        TrainingDefaults,
        check_portability,
        default_device_for,
        load_preset,
        resolve_preset,
    )
    from autotune.train import apply_overrides
    from autotune.train import train as run_training

    if on_oom not in ("fail", "adapt"):
        raise UsageError(f"--on-oom: expected 'fail' or 'adapt', got {on_oom!r}")
    if (preset is None) == (model is None):
        raise UsageError(
            "give --preset PRESET (a tuned config from `autotune search`) or --model NAME "
            "(an untuned fp32 run), and not both"
        )
    for flag, value in (("--max-steps", max_steps), ("--eval-interval", eval_interval)):
        if value is not None and value < 1:
            raise UsageError(f"{flag}: expected a positive integer, got {value}")
    if lr is not None and not lr > 0:
        raise UsageError(f"--lr: expected a number > 0, got {lr}")

    profile = probe()
    if preset is not None:
        path = resolve_preset(preset)
        loaded = load_preset(path)
        wanted = device or default_device_for(loaded, profile)
        report = check_portability(loaded, profile, _rank_device(wanted), force=force)
        for text in report.warnings:
            _warn(text)
        spec = loaded.model.load()
        config, training, name = loaded.config, loaded.training, loaded.name
    else:
        spec = load_model(str(model))
        wanted = device or profile.default_device
        config = TrainConfig(micro_batch=spec.global_batch, seq_len=spec.seq_len)
        training, name = TrainingDefaults(), spec.name

    changes: dict[str, object] = {}
    if max_steps is not None:
        changes.update(max_steps=max_steps, epochs=None)
    if lr is not None:
        changes["lr"] = lr
    if eval_interval is not None:
        changes["eval_interval"] = eval_interval
    if changes:
        training = dataclasses.replace(training, **changes)  # type: ignore[arg-type]
    config, training = apply_overrides(config, training, sets or [])

    caps = profile.device(_rank_device(wanted))
    check_config(config, spec=spec, device=caps)
    result = run_training(
        spec,
        config,
        training,
        data=data,
        out_dir=out if out is not None else DEFAULT_OUT_ROOT / _slug(name),
        device=wanted,
        device_caps=caps,
        resume=resume,
        on_oom=on_oom,  # type: ignore[arg-type]
        text_column=text_column,
        target_column=target_column,
        json_logs=json_logs,
    )
    sys.stdout.flush()
    if result.exit_code:
        raise typer.Exit(result.exit_code)
