"""What a training run returns (``TrainResult``), the figures of its steady state, and
``summary.json``, the result as the run folder keeps it; ``finish`` makes both from what
the trainer holds at the end of its run."""

from __future__ import annotations

import json
import signal
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config.train_config import TrainConfig
from autotune.core.files import atomic_write_text
from autotune.core.plain import to_plain
from autotune.engine.mfu import mfu

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps
    from autotune.train.progress import TrainingProgress

__all__ = ["SteadyFigures", "TrainResult", "finish", "steady_figures", "write_summary"]


@dataclass(frozen=True, kw_only=True)
class TrainResult:
    out_dir: Path
    start_step: int  # 0, or the step a resume continued from
    steps: int  # the last completed step
    total_steps: int
    losses: tuple[float, ...]  # training loss of each step this process ran
    eval: Mapping[str, Any] | None  # the last evaluation
    best_eval_loss: float | None
    # after the warm-up steps (compilation included), evaluation and checkpoints excluded:
    # total samples / total step time (data waits included), and from the median step
    steady_tokens_per_s: float | None
    steady_samples_per_s: float | None
    mfu: float | None
    interrupted: str | None  # "SIGINT" / "SIGTERM" / "SIGHUP" when a signal stopped the run
    checkpoint: Path | None  # the last checkpoint written
    config: TrainConfig  # the config the run ended with (after any OOM adaptation)
    oom_adaptations: int = 0
    wall_s: float = 0.0
    median_step_s: float | None = None
    median_tokens_per_s: float | None = None

    @property
    def exit_code(self) -> int:
        """0 when finished; 128 + the signal number when a signal stopped it."""
        if self.interrupted is None:
            return 0
        return 128 + int(getattr(signal, self.interrupted, signal.SIGTERM))

    def to_dict(self) -> dict[str, Any]:
        data = to_plain(self)
        data["config"] = self.config.to_dict()  # a single process's config has no parallel key
        return data


@dataclass(frozen=True, kw_only=True)
class SteadyFigures:
    """Throughput after the warm-up steps: from the total time, and from the median step."""

    samples_per_s: float | None  # total samples / total step time
    tokens_per_s: float | None  # samples_per_s x tokens (or the model's unit) per sample
    median_step_s: float | None
    median_tokens_per_s: float | None


def steady_figures(
    step_times: Sequence[float], *, samples_per_step: int, per_sample: int
) -> SteadyFigures:
    """The figures of ``step_times`` without the first steps (warm-up and compilation: a
    tenth of them, from 1 to 10); ``per_sample`` is the tokens (or units) per sample."""
    skip = max(1, min(10, len(step_times) // 10))  # warm-up (and compilation) steps
    steady = step_times[skip:]
    sps = samples_per_step * len(steady) / sum(steady) if steady and sum(steady) > 0 else None
    median = statistics.median(steady) if steady else None
    return SteadyFigures(
        samples_per_s=sps,
        tokens_per_s=None if sps is None else sps * per_sample,
        median_step_s=median,
        median_tokens_per_s=samples_per_step * per_sample / median if median else None,
    )


def write_summary(
    result: TrainResult, *, rate: float | None, label: str, message: Callable[[str], None]
) -> None:
    """``summary.json`` in the run folder, and the closing line when there was a steady
    state to measure (``rate``, in the model's throughput unit ``label``)."""
    atomic_write_text(
        result.out_dir / "summary.json",
        json.dumps(result.to_dict(), indent=2, default=str) + "\n",
    )
    if rate is not None:
        mfu = f", MFU {result.mfu:.1%}" if result.mfu is not None else ""
        best = "-" if result.best_eval_loss is None else f"{result.best_eval_loss:.4f}"
        message(
            f"done: step {result.steps}/{result.total_steps} in {result.wall_s:.1f} s; steady "
            f"{rate:,.0f} {label}{mfu}; best val loss {best}; run folder {result.out_dir}"
        )


def finish(
    progress: TrainingProgress,
    *,
    spec: ModelSpec,
    config: TrainConfig,
    global_config: TrainConfig,
    caps: DeviceCaps | None,
    world_size: int,
    out_dir: Path,
    start_step: int,
    steps: int,
    total: int,
    best_eval_loss: float | None,
    checkpoint: Path | None,
    oom_adaptations: int,
    interrupted: str | None,
    wall_s: float,
    message: Callable[[str], None] | None,
    steps_synced: bool = True,
) -> TrainResult:
    """The result of a run of ``spec`` that started at ``start_step``, reached ``steps`` of
    ``total`` and ran the steps ``progress`` holds, under ``config`` (one process's share
    of ``global_config``, the config it returns) on ``world_size`` processes. With
    ``message`` (rank 0, unless the run trained nothing) it is written to the run
    folder's ``summary.json`` and said there. ``steps_synced``: whether each step's time
    ran to its end (False on a GPU, whose steps are queued: no median step then)."""
    cfg = config
    figures = steady_figures(
        progress.step_times,
        samples_per_step=cfg.micro_batch * cfg.grad_accum * world_size,
        per_sample=spec.tokens_per_sample(cfg.seq_len),
    )
    sps, tps = figures.samples_per_s, figures.tokens_per_s
    last_eval = progress.last_eval
    result = TrainResult(
        out_dir=out_dir,
        start_step=start_step,
        steps=steps,
        total_steps=total,
        losses=tuple(progress.losses),
        eval=None if last_eval is None else dict(last_eval),
        best_eval_loss=best_eval_loss,
        steady_tokens_per_s=spec.pick_throughput(tps, None),  # None: a samples/s model
        steady_samples_per_s=sps,
        mfu=None if sps is None else mfu(spec, cfg, caps, samples_per_s=sps, world_size=world_size),
        interrupted=interrupted,
        checkpoint=checkpoint,
        config=global_config,
        oom_adaptations=oom_adaptations,
        wall_s=wall_s,
        # None where a step's end was not waited for (a GPU's steps are queued; the loss
        # is read at log steps): one step's time is then its launch or the queue's wait,
        # while the figures over all the steps stand
        median_step_s=figures.median_step_s if steps_synced else None,
        median_tokens_per_s=spec.pick_throughput(figures.median_tokens_per_s, None)
        if steps_synced
        else None,
    )
    if message is not None:
        write_summary(
            result,
            rate=None if sps is None else spec.pick_throughput(tps, sps),
            label=spec.throughput_label,
            message=message,
        )
    return result
