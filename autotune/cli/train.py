"""`autotune train`: the full run with a preset's config, real data, checkpoints and logs.

Single process::

    autotune train --preset best.yaml [--data corpus/] [--max-steps 2000]

Several GPUs or machines (DistributedDataParallel; the preset's global batch is kept)::

    torchrun --nproc-per-node 4 -m autotune train --preset best.yaml

A preset searched with ``--nproc-per-node N`` (``config.parallel``) launches torchrun
itself: ``autotune train --preset best.yaml`` runs what ``python -m torch.distributed.run
--standalone --nproc-per-node N -m autotune train --preset best.yaml`` would (the same
arguments) through autotune's launcher (``autotune/engine/launcher.py``), each rank
applying the preset's DDP/FSDP settings. Under a torchrun of your own (``WORLD_SIZE``
set) nothing is relaunched; ``--set config.parallel=null`` trains such a preset on one
process.

Exit codes: 0 finished; 1 the run failed (out of memory, a non-finite loss); 2 bad input
(flags, preset, data, a checkpoint that does not fit); 130 / 143 stopped by SIGINT /
SIGTERM after saving a checkpoint (continue with ``--resume auto``). On several
processes: the first failed rank's code, or 128 + the signal that ended it.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autotune.cli._common import ModelArgOption, cli_command
from autotune.core import launch_env
from autotune.core.errors import UsageError
from autotune.machine import omp

if TYPE_CHECKING:
    from autotune.config.parallel import ParallelConfig

__all__ = ["train"]

DEFAULT_OUT_ROOT = Path("autotune_runs") / "train"


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "run"


def _warn(text: str) -> None:
    if launch_env.rank() == 0:
        typer.echo(f"warning: {text}", err=True)


# How the library's errors name a parameter here: by its flag.
_FLAGS = {
    "preset": "--preset PRESET",
    "model": "--model NAME",
    "max_steps": "--max-steps",
    "eval_interval": "--eval-interval",
    "lr": "--lr",
    "out_dir": "--out",
    "data": "--data",
    "overrides": "--set",
    "model_args": "--model-arg",
}

_Preset = Annotated[
    str | None,
    typer.Option(
        "--preset", help="A preset file or the name of one (see `autotune presets list`)."
    ),
]
_Model = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="Train a model without a preset (fp32, micro-batch = the model's global "
        "batch): a built-in name, a Hugging Face architecture (hf:llama; with "
        "--model-arg), pkg.module:attr or path/to/file.py:attr.",
    ),
]
_Data = Annotated[
    Path | None,
    typer.Option(
        "--data",
        help="Language models: a text file, a folder of *.txt/*.md, or JSONL with a "
        '"text" field (default: the Python docs shipped with CPython). pointer-gen: '
        'JSONL of {"source", "summary"}. text-regressor: CSV with text, numeric '
        "columns and a target.",
    ),
]
_Out = Annotated[
    Path | None,
    typer.Option("--out", help="Run folder (default: ./autotune_runs/train/<preset or model>)."),
]
_MaxSteps = Annotated[
    int | None,
    typer.Option("--max-steps", help="Optimizer steps (overrides the preset's steps/epochs)."),
]
_Lr = Annotated[float | None, typer.Option("--lr", help="Peak learning rate.")]
_Sets = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="Override a field: config.micro_batch=4, config.knobs.block_group=2, "
        "training.warmup_steps=50 (repeatable).",
    ),
]
_Resume = Annotated[
    str | None,
    typer.Option(
        "--resume",
        help="'auto' (the latest checkpoint in the run folder, or a fresh start if there "
        "is none) or a checkpoint file or folder.",
    ),
]
_OnOOM = Annotated[
    str,
    typer.Option(
        "--on-oom",
        help="fail: save and stop with advice; adapt: halve the micro-batch, double the "
        "accumulation (same global batch) and go on.",
    ),
]
_Device = Annotated[
    str | None,
    typer.Option("--device", help="cpu, cuda or cuda:N (default: the preset's kind)."),
]
_Force = Annotated[
    bool,
    typer.Option("--force", help="Run a preset even where its recorded memory may not fit."),
]
_EvalInterval = Annotated[
    int | None, typer.Option("--eval-interval", help="Evaluate every N steps.")
]
_TextColumn = Annotated[
    str, typer.Option("--text-column", help="text-regressor CSV: the text column.")
]
_TargetColumn = Annotated[
    str, typer.Option("--target-column", help="text-regressor CSV: the target column.")
]
_TrustModel = Annotated[
    bool,
    typer.Option(
        "--trust-model",
        help="Run the model code a preset names when it is not a built-in model (a preset "
        "is data: its user code runs only when you say so).",
    ),
]
_JsonLogs = Annotated[
    bool, typer.Option("--json-logs", help="Print one JSON record per log line on stdout.")
]


def _relaunch_under_torchrun(nproc: int, out_dir: Path) -> None:
    """Replace this process by autotune's torchrun launcher (``autotune/engine/launcher.py``)
    running this same command on ``nproc`` processes; torchrun's own folder goes in the
    run's, ``out_dir/torchrun`` (both made first: torchrun failed on a folder it could not
    make with a traceback)."""
    import shlex

    from autotune.engine.launcher import launcher_command
    from autotune.train.run_folder import create_run_folder

    create_run_folder(out_dir, "--out")
    create_run_folder(out_dir / "torchrun", "--out")  # where torchrun keeps its folder
    args = ["autotune", *sys.argv[1:]]
    command = launcher_command(nproc, args, log_dir=out_dir / "torchrun")
    typer.echo(f"the preset runs on {nproc} processes: {shlex.join(command)}", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command)


def _note_another_world(parallel: ParallelConfig | None) -> None:
    """Where ``WORLD_SIZE`` is set (your own torchrun, or one left in the shell), autotune
    starts no processes and trains on that many: say so where the preset ran on another
    count (a stray ``WORLD_SIZE=1`` trained a two-process preset on one, without a word)."""
    wanted = parallel.nproc_per_node if parallel is not None else 1
    if os.environ.get("WORLD_SIZE") and launch_env.world_size() != wanted:
        _warn(
            f"WORLD_SIZE={launch_env.world_size()} in the environment: training on "
            f"{launch_env.world_size()} process(es), where the preset ran on {wanted} (the "
            "global batch stays the preset's); unset WORLD_SIZE to have autotune start "
            f"{wanted}"
        )


def _check_data_path(data: Path) -> None:
    """A ``--data`` path that is not there (or is no file or folder) is said here, once,
    before a run of several processes makes its run folder: each rank said it (the same
    paragraph on every rank) and left an empty run folder behind. The ranks check the
    rest (what the files hold)."""
    from autotune.core.errors import DataError
    from autotune.core.files import regular_file_size

    path = data.expanduser()
    if not path.is_dir():
        regular_file_size(path, what="data path", error=DataError)


def _relaunch_with_omp_policy() -> None:
    """Replace this process by the same command, started with the OpenMP wait policy the
    run's config was measured with (already in ``os.environ``): OpenMP took this
    process's from the environment when torch loaded (``autotune/machine/omp.py``)."""
    typer.echo(
        f"config.omp_spin: torch's CPU threads spin between operations; starting again "
        f"with {omp.OMP_WAIT_VAR}={os.environ[omp.OMP_WAIT_VAR]}",
        err=True,
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "autotune", *sys.argv[1:]])


@cli_command
def train(
    preset: _Preset = None,
    model: _Model = None,
    data: _Data = None,
    out: _Out = None,
    max_steps: _MaxSteps = None,
    lr: _Lr = None,
    sets: _Sets = None,
    resume: _Resume = None,
    on_oom: _OnOOM = "fail",
    device: _Device = None,
    force: _Force = False,
    eval_interval: _EvalInterval = None,
    text_column: _TextColumn = "text",
    target_column: _TargetColumn = "target",
    json_logs: _JsonLogs = False,
    trust_model: _TrustModel = False,
    model_arg: ModelArgOption = None,
) -> None:
    """Train with a preset's tuned config: real data, eval, checkpoints, resume, DDP."""
    from autotune.machine.compile_cache import shared_compile_cache
    from autotune.models.registry import parse_model_args
    from autotune.train.launch import prepare_training
    from autotune.train.run import train as run_training

    launch_env.check()  # RANK=abc was read only by a warning, when there was one
    if on_oom not in ("fail", "adapt"):
        raise UsageError(f"--on-oom: expected 'fail' or 'adapt', got {on_oom!r}")
    run = prepare_training(
        preset=preset,
        model=model,
        device=device,
        force=force,
        max_steps=max_steps,
        lr=lr,
        eval_interval=eval_interval,
        overrides=sets or [],
        warn=_warn,
        option_names=_FLAGS,
        trust_model=trust_model,
        model_args=parse_model_args(model_arg or []),
    )
    if omp.restart_needed(run.config):  # OpenMP reads it when torch loads: start again
        os.environ[omp.OMP_WAIT_VAR] = str(omp.wait_policy(run.config, None))
        if run.config.parallel is None or os.environ.get("WORLD_SIZE"):
            _relaunch_with_omp_policy()
    out_dir = out if out is not None else DEFAULT_OUT_ROOT / _slug(run.name)
    _note_another_world(run.config.parallel)
    if run.config.parallel is not None and not os.environ.get("WORLD_SIZE"):
        if data is not None:
            _check_data_path(data)
        _relaunch_under_torchrun(run.config.parallel.nproc_per_node, out_dir)
    with shared_compile_cache(DEFAULT_OUT_ROOT.parent):  # the search's compiled code
        result = run_training(
            run.spec,
            run.config,
            run.training,
            data=data,
            out_dir=out_dir,
            device=run.device,
            device_caps=run.caps,
            resume=resume,
            on_oom=on_oom,  # type: ignore[arg-type]
            text_column=text_column,
            target_column=target_column,
            json_logs=json_logs,
            option_names=_FLAGS,
        )
    sys.stdout.flush()
    if result.exit_code:
        raise typer.Exit(result.exit_code)
