"""The full training run: the burst's step function, for real, with data, eval, checkpoints.

``Trainer`` takes a model spec, a ``TrainConfig`` (how a step runs: what the search tuned),
the optimisation settings (``TrainingDefaults``: learning rate, schedule, intervals), the
data and an output folder; a preset is only where the CLI gets those from. Each optimizer
step is ``Stepper.step`` (autotune/engine/step.py) over ``grad_accum`` micro-batches: what the
bursts measured is what runs. Its parts live beside it: the batch stream (batches.py), the
run folder and its checkpoints (run_folder.py), the learning-rate schedule (schedule.py),
evaluation (evaluation.py), the console and metrics output (train_log.py).

The run folder holds ``ckpt-step*.pt`` (the last ``keep_last``), ``best.pt`` (lowest
validation loss), ``tokenizer.json``, ``data.json``, ``metrics.jsonl`` (one JSON record per
log line and per evaluation), ``summary.json`` at the end, and ``tb/`` when TensorBoard is
installed.

Determinism and resume: the data order is a function of ``(seed, epoch)`` only, the data
position (epoch, samples into it) and every RNG state are in each checkpoint, so a resumed
run continues the same loss curve as one never stopped (exactly, on CPU with
``num_workers=0``).

Signals: SIGINT, SIGTERM or SIGHUP finishes the current step, saves a checkpoint and
returns with ``interrupted`` set; the CLI then exits with 128 + the signal number (130 for
SIGINT, 143 for SIGTERM, 129 for SIGHUP), as a shell does, so a scheduler sees the run did
not finish. DataLoader workers leave all three to this process
(``signals.ignore_stop_signals``), so a signal to the whole process group stops the run the
same way; they are shut down as the run ends. A second SIGINT stops at once
(KeyboardInterrupt). Out of memory: the last completed step is saved and
``TrainingOOMError`` says what to do, or with ``on_oom="adapt"`` the micro-batch halves,
the accumulation doubles (the global batch is unchanged) and the step is run again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import random
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import user_code
from autotune.core.errors import AutotuneError, TrainingOOMError, UsageError
from autotune.core.files import atomic_write_text
from autotune.core.signals import STOP_SIGNALS
from autotune.data.loader import loader_kwargs
from autotune.data.tasks import load_data
from autotune.data.train_data import TrainData
from autotune.engine.parallel import full_state, is_sharded, load_full_state, wrap_model
from autotune.engine.step import (
    Stepper,
    apply_allocator_settings,
    apply_backend_flags,
    compile_model,
    make_optimizer,
    prepare_model,
    to_device,
)
from autotune.machine import omp
from autotune.models.registry import is_user_code
from autotune.train.batches import BatchStream
from autotune.train.checkpoint import CheckpointError, restore_rng_state
from autotune.train.distributed import (
    DistInfo,
    any_flag,
    barrier,
    broadcast_object,
    destroy_distributed,
    init_distributed,
    per_rank_config,
)
from autotune.train.evaluation import eval_metrics, sample_text
from autotune.train.log import Display
from autotune.train.run_folder import RunFolder
from autotune.train.schedule import make_scheduler, set_peak_lr

if TYPE_CHECKING:
    from autotune.contract.spec import Batch, ModelSpec
    from autotune.machine.caps import DeviceCaps

__all__ = [
    "OnOOM",
    "TrainResult",
    "Trainer",
    "TrainingDefaults",
    "TrainingOOMError",
    "train",
]

OnOOM = Literal["fail", "adapt"]
CHECKPOINT_FORMAT = 1
_OOM_ERRORS: tuple[type[BaseException], ...] = (torch.OutOfMemoryError, MemoryError)


# -- result -------------------------------------------------------------------------------------


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
        data = dataclasses.asdict(self)
        data["out_dir"] = str(self.out_dir)
        data["checkpoint"] = None if self.checkpoint is None else str(self.checkpoint)
        data["config"] = self.config.to_dict()
        data["losses"] = list(self.losses)
        data["eval"] = None if self.eval is None else dict(self.eval)
        return data


# -- the trainer --------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """``value`` as weights_only-loadable plain data (unknown objects become text)."""
    if value is None:
        return None
    for kind in (bool, int, float, str):  # exact types: subclasses (numpy, TorchVersion) are
        if isinstance(value, kind):  # not weights_only-loadable
            return kind(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)


def _new_interval() -> dict[str, float]:
    """Sums over the steps since the last log line: seconds, data wait, optimizer, samples."""
    return {"time": 0.0, "data": 0.0, "opt": 0.0, "samples": 0.0}


@dataclass(kw_only=True)
class _Progress:
    """What the training loop carries from one step to the next."""

    tokens_per_sample: int
    losses: list[float] = field(default_factory=list)  # every step this process ran
    pending: list[torch.Tensor] = field(default_factory=list)  # losses not yet read
    step_times: list[float] = field(default_factory=list)
    interval: dict[str, float] = field(default_factory=_new_interval)
    last_eval: dict[str, Any] | None = None
    grad_norm: torch.Tensor | None = None


class Trainer:
    """One training run (see the module docstring). ``run()`` returns a ``TrainResult``."""

    def __init__(
        self,
        spec: ModelSpec,
        config: TrainConfig,
        training: TrainingDefaults,
        data: TrainData,
        out_dir: str | Path,
        *,
        device: str | torch.device = "cpu",
        device_caps: DeviceCaps | None = None,
        resume: str | Path | None = None,
        on_oom: OnOOM = "fail",
        dist: DistInfo | None = None,
        json_logs: bool = False,
        progress: bool | None = None,
        echo: Callable[[str], None] | None = None,
        tensorboard: bool = True,
        option_names: Mapping[str, str] | None = None,
    ) -> None:
        if on_oom not in ("fail", "adapt"):
            raise UsageError(f"on_oom: expected 'fail' or 'adapt', got {on_oom!r}")
        self.dist = dist or DistInfo()
        self.global_config = config
        self.config = per_rank_config(config, self.dist.world_size)
        # FSDP: parameters are sharded, so evaluation and checkpoints are collectives
        self.sharded = is_sharded(config, self.dist.world_size)
        self._full_state: tuple[dict[str, Any], dict[str, Any]] | None = None
        self.training = training
        self.data = data
        self.out_dir = Path(out_dir).expanduser()
        self.device = torch.device(device)
        self.caps = device_caps
        self.on_oom = on_oom
        self.resume = resume
        self.display = Display(
            self.out_dir,
            enabled=self.dist.is_main,
            json_logs=json_logs,
            progress=progress,
            echo=echo,
            tensorboard=tensorboard,
        )
        self.spec = self._spec_for_run(spec)
        self.step = 0
        self.best_eval_loss: float | None = None
        self.oom_adaptations = 0
        self._stop_signal: int | None = None
        self._old_mask: set[int | signal.Signals] | None = None
        self._old_handlers: dict[int, Any] = {}
        self.folder = RunFolder(
            self.out_dir,
            dist=self.dist,
            keep_last=training.keep_last,
            message=self.display.message,
            option_names=option_names,
        )
        self.stream = BatchStream(data, config=self.config, seed=training.seed, dist=self.dist)
        self.eval_loader = self._make_eval_loader()

    # -- set-up ---------------------------------------------------------------------------
    def _spec_for_run(self, spec: ModelSpec) -> ModelSpec:
        args: dict[str, Any] = dict(self.data.spec_args)
        if "label_smoothing" in spec.args:
            args["label_smoothing"] = self.training.label_smoothing
        elif self.training.label_smoothing:
            self.display.message(
                f"warning: model {spec.name!r} has no label_smoothing argument; "
                f"training.label_smoothing={self.training.label_smoothing} is ignored"
            )
        changed = {k: v for k, v in args.items() if spec.args.get(k) != v}
        for key, value in changed.items():
            if key != "label_smoothing":
                self.display.message(
                    f"note: {spec.name}.{key} set to {value} by the data (was {spec.args.get(key)})"
                )
        return spec.with_args(**changed) if changed else spec

    def _make_eval_loader(self) -> DataLoader[Any]:
        """The validation loader: twice the training micro-batch (no gradients to keep)."""
        return DataLoader(
            self.data.val,
            batch_size=2 * self.config.micro_batch,
            shuffle=False,
            drop_last=False,
            num_workers=0,
            pin_memory=loader_kwargs(self.config)["pin_memory"],
            collate_fn=self.data.collate_fn,
        )

    def total_steps(self) -> int:
        steps = [self.training.max_steps] if self.training.max_steps is not None else []
        if self.training.epochs is not None:
            per_step = self.config.micro_batch * self.config.grad_accum
            steps.append(self.training.epochs * max(1, self.stream.samples_per_epoch // per_step))
        return min(steps)

    def _build(self, resumed: dict[str, Any] | None) -> None:
        """Everything a step needs, in order: model, optimizer, schedule, step function,
        timing hooks; then the checkpoint's state (``resumed``) and the data loaders."""
        seed = self.training.seed
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        if resumed is not None and resumed.get("oom_adapted"):
            self._setup_adapted_batch(TrainConfig.from_mapping(resumed["config"]))
        self._setup_model()
        self._setup_optimizer()
        self._setup_schedule()
        self._setup_stepper()
        self._setup_hooks()
        # Per-rank randomness (dropout) after an identical initialisation everywhere.
        torch.manual_seed(seed + self.dist.rank)
        if resumed is not None:
            self._restore(resumed)
        self._setup_data()

    def _setup_adapted_batch(self, saved: TrainConfig) -> None:
        """Continue with the micro-batch a checkpoint adapted to after running out of memory."""
        if saved.global_batch != self.global_config.global_batch:
            return
        self.global_config = self.global_config.replace(
            micro_batch=saved.micro_batch, grad_accum=saved.grad_accum
        )
        self.config = per_rank_config(self.global_config, self.dist.world_size)
        self.display.message(
            f"note: the checkpoint ran with micro_batch {saved.micro_batch} x grad_accum "
            f"{saved.grad_accum} after running out of memory; continuing with those"
        )

    def _setup_model(self) -> None:
        """``raw_model`` (its state is what a checkpoint holds) and ``model``, the module a
        step runs: wrapped in DDP or sharded by FSDP2 under torchrun (the config's
        ``parallel`` knobs), compiled per the config. A ``build_fn``
        that fails is a ``ModelLoadError`` naming it (``user_code``)."""
        apply_allocator_settings(self.config)  # expandable segments, as the burst ran
        apply_backend_flags(self.config, self.device)
        if (problem := omp.mismatch(self.config)) is not None:  # `autotune train` sets it
            self.display.message(f"warning: {problem}")
        with user_code(self.spec, "build_fn"):
            self.raw_model = prepare_model(self.spec, self.config, self.device)
        # DDP with the config's knobs, or FSDP2 sharding raw_model in place (parallel.py)
        model = wrap_model(
            self.raw_model, self.config, self.device, world_size=self.dist.world_size
        )
        self.model = compile_model(model, self.config)

    def _setup_optimizer(self) -> None:
        self.optimizer = make_optimizer(
            self.raw_model,
            self.config,
            lr=self.training.lr,
            weight_decay=self.training.weight_decay,
        )

    def _setup_schedule(self) -> None:
        t = self.training
        self.scheduler = make_scheduler(
            self.optimizer,
            warmup=t.warmup_steps,
            total=self.total_steps(),
            schedule=t.schedule,
            min_ratio=t.min_lr_ratio,
        )

    def _setup_stepper(self) -> None:
        """The step the bursts measured: accumulation, autocast, scaler, clipping, schedule."""
        self.stepper = Stepper(
            self.model,
            self.optimizer,
            config=self.config,
            device=self.device,
            loss_fn=self.spec.loss_fn,
            grad_clip=self.training.grad_clip,
            scheduler=self.scheduler,
        )

    def _setup_hooks(self) -> None:
        """Time ``optimizer.step`` (the log line's optimizer share) into ``_opt_time``."""
        self._opt_time = 0.0
        self._opt_start = 0.0

        def pre(*_: Any) -> None:
            self._opt_start = time.perf_counter()

        def post(*_: Any) -> None:
            self._opt_time += time.perf_counter() - self._opt_start

        self.optimizer.register_step_pre_hook(pre)
        self.optimizer.register_step_post_hook(post)

    def _setup_data(self) -> None:
        """The loaders for the run's config (a checkpoint may have changed the micro-batch)."""
        self.stream.config = self.config
        self.eval_loader = self._make_eval_loader()

    def _restore(self, state: dict[str, Any]) -> None:
        try:
            if self.sharded:  # every rank loads the whole state into its shards
                load_full_state(self.raw_model, self.optimizer, state["model"], state["optimizer"])
            else:
                self.raw_model.load_state_dict(state["model"])
        except (RuntimeError, KeyError) as exc:
            raise CheckpointError(
                f"the checkpoint does not fit model {self.spec.name!r} with these args "
                f"(it was written for {state.get('model_name')!r} "
                f"{state.get('model_args')}): {str(exc).splitlines()[0]}"
            ) from None
        if not self.sharded:
            self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        set_peak_lr(self.scheduler, self.training.lr)  # --lr, --max-steps may change them
        self.stepper.load_state_dict(state["stepper"])
        saved_tok = state.get("tokenizer")
        tokenizer = self.data.tokenizer
        if (
            saved_tok is not None
            and tokenizer is not None
            and saved_tok != _plain(tokenizer.to_dict())
        ):
            raise CheckpointError(
                "the checkpoint was trained with a different tokenizer or vocabulary than "
                "this data gives (see tokenizer.json in the run folder); resume with the "
                "same --data"
            )
        rngs = state["rng"]
        if len(rngs) != self.dist.world_size:
            self.display.message(
                f"note: the checkpoint was written by {len(rngs)} process(es), this run has "
                f"{self.dist.world_size}: random streams and data order per process differ "
                "from the original run"
            )
        restore_rng_state(rngs[self.dist.rank % len(rngs)])
        data = state["data"]
        self.stream.seek(int(data["epoch"]), int(data["offset"]))
        self.step = int(state["step"])
        best = state.get("best_eval_loss")
        self.best_eval_loss = None if best is None else float(best)
        self.oom_adaptations = int(state.get("oom_adaptations", 0))

    # -- checkpoints ------------------------------------------------------------------------
    def _state(self, rngs: Sequence[Any]) -> dict[str, Any]:
        tokenizer = self.data.tokenizer
        full = self._full_state
        return {
            "format": CHECKPOINT_FORMAT,
            "step": self.step,
            "model": full[0] if full else self.raw_model.state_dict(),
            "optimizer": full[1] if full else self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "stepper": self.stepper.state_dict(),
            "rng": list(rngs),
            "data": {
                "epoch": self.stream.epoch,
                "offset": self.stream.offset,
                "world_size": self.dist.world_size,
                "seed": self.training.seed,
            },
            "config": _plain(self.global_config.to_dict()),
            "training": _plain(dataclasses.asdict(self.training)),
            "model_name": self.spec.name,
            "model_source": self.spec.source,
            "model_args": _plain(dict(self.spec.args)),
            "best_eval_loss": self.best_eval_loss,
            "oom_adapted": self.oom_adaptations > 0,
            "oom_adaptations": self.oom_adaptations,
            "tokenizer": None if tokenizer is None else _plain(tokenizer.to_dict()),
            "torch_version": str(torch.__version__),
        }

    def save(self, *, best: bool = False) -> Path | None:
        """Checkpoint the current step (collective under DDP: every rank must call it).
        Under FSDP every rank first gathers the whole state (a collective too)."""
        self._full_state = full_state(self.raw_model, self.optimizer) if self.sharded else None
        try:
            return self.folder.save(self.step, self._state, best=best)
        finally:
            self._full_state = None

    # -- evaluation -------------------------------------------------------------------------
    def evaluate(self) -> dict[str, Any]:
        """Validation loss (and the model's metric) over ``eval_batches`` larger batches,
        with a sample of text from a language model."""
        spec, config, device = self.spec, self.config, self.device
        out = eval_metrics(
            self.raw_model,
            self.eval_loader,
            spec=spec,
            config=config,
            device=device,
            max_batches=self.training.eval_batches,
        )
        sample = sample_text(
            self.raw_model,
            self.data,
            spec=spec,
            config=config,
            device=device,
            seed=self.training.seed,
        )
        if sample is not None:
            out["prompt"], out["sample"] = sample
        return out

    # -- the loop ---------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        if self._stop_signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self._stop_signal = signum
        self.display.message(
            f"{signal.Signals(signum).name}: stopping after this step and saving a checkpoint "
            "(press Ctrl-C again to stop at once)"
        )

    def _install_signals(self) -> None:
        """The clean stop on SIGINT, SIGTERM and SIGHUP, except a signal the parent had
        ignored: ``nohup`` ignores SIGHUP so that closing the terminal leaves the run
        alone, and a shell without job control starts ``cmd &`` with SIGINT ignored; Python
        honours both, so does the trainer. A signal mask is inherited through fork and exec
        too: a parent that blocked a stop signal would leave it pending for the whole run,
        so the handled ones are unblocked here, and the mask restored after."""
        if threading.current_thread() is not threading.main_thread():
            return
        handled = [s for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN]
        for sig in handled:  # SIGINT, SIGTERM and SIGHUP: the same clean stop
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if hasattr(signal, "pthread_sigmask") and handled:
            self._old_mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, handled)

    def _restore_signals(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers.clear()
        if self._old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old_mask)
            self._old_mask = None

    def _adapt_to_oom(self) -> bool:
        """Halve the micro-batch and double the accumulation; False when impossible."""
        cfg = self.config
        if self.on_oom != "adapt" or self.dist.enabled or cfg.micro_batch < 2:
            return False
        new = cfg.replace(micro_batch=cfg.micro_batch // 2, grad_accum=cfg.grad_accum * 2)
        self.display.message(
            f"out of memory at step {self.step + 1} with micro_batch {cfg.micro_batch}: "
            f"continuing with micro_batch {new.micro_batch} x grad_accum {new.grad_accum} "
            f"(global batch {new.global_batch} unchanged)"
        )
        self.config = self.global_config = new
        self.stepper.config = new
        self.oom_adaptations += 1
        epoch, offset = self.stream.epoch, self.stream.offset
        self.stream.build(new)
        self.stream.seek(epoch, offset)
        self.eval_loader = self._make_eval_loader()
        return True

    def _oom_message(self, exc: BaseException, saved: Path | None) -> str:
        cfg = self.config
        where = f"saved the last completed step to {saved}; " if saved else ""
        half = max(1, cfg.micro_batch // 2)
        return (
            f"out of memory at step {self.step + 1} (micro_batch {cfg.micro_batch}, grad_accum "
            f"{cfg.grad_accum}, {cfg.precision}): {str(exc).splitlines()[0] if str(exc) else ''}"
            f"; {where}rerun with --resume auto --on-oom adapt (halves the micro-batch and "
            f"doubles accumulation, same global batch), or --set config.micro_batch={half} "
            f"--set config.grad_accum={cfg.grad_accum * cfg.micro_batch // half}, or "
            "--set config.activation_checkpointing=true where the model supports it"
        )

    def _free_after_oom(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def run(self) -> TrainResult:
        t_start = time.perf_counter()
        start_step, total = self._start()
        progress = _Progress(tokens_per_sample=self.spec.tokens_per_sample(self.config.seq_len))
        self._install_signals()
        self.display.start(total, self.step)
        try:
            while self.step < total:
                if any_flag(self.dist, self._stop_signal is not None, self.device):
                    break
                if not self._train_step(progress, total):
                    break
            if progress.pending:  # steps since the last log line, when a signal stopped the loop
                self._log_values(progress, self._read_pending(progress), total)
        finally:
            self._restore_signals()
            self.stream.close()  # its workers end now, not at the interpreter's exit
            self.display.advance(self.step)
            self.display.close()
        return self._finish(
            start_step=start_step,
            total=total,
            losses=progress.losses,
            step_times=progress.step_times,
            last_eval=progress.last_eval,
            interrupted=self._stopped_early(total),
            wall_s=time.perf_counter() - t_start,
        )

    def _start(self) -> tuple[int, int]:
        """Prepare the run folder, build the run (from a checkpoint when resuming) and say
        what it is; returns the step it starts from and the total steps."""
        resumed = self.folder.find_resume(self.resume)
        if self.dist.is_main:
            self.folder.prepare(resumed[0] if resumed else None)
        barrier(self.dist)
        self._build(resumed[1] if resumed else None)
        total = self.total_steps()
        if self.dist.is_main:
            self.data.save(self.out_dir)
        self.display.open_metrics(truncate_after=self.step)
        self._announce(resumed[0] if resumed else None, total)
        return self.step, total

    def _model_code(self) -> contextlib.AbstractContextManager[None]:
        """A user model's forward and loss run under ``user_code``: what they raise is a
        ModelLoadError naming the model (exit 2), not a traceback. A built-in model's
        failure is autotune's own bug, and keeps its traceback."""
        if is_user_code(self.spec.source):
            return user_code(self.spec, "loss_fn")
        return contextlib.nullcontext()

    def _train_step(self, progress: _Progress, total: int) -> bool:
        """One optimizer step, then its logging, evaluation and checkpoint; False when a
        signal stopped the data loading (the step did not run)."""
        t0 = time.perf_counter()
        start_pos = (self.stream.epoch, self.stream.offset)
        try:
            micro, data_wait = self._next_micro_batches()
        except Exception:
            if self._stop_signal is None:
                raise
            self.stream.seek(*start_pos)  # the workers died of the signal too
            return False
        self._opt_time = 0.0
        try:
            with self._model_code():
                out = self.stepper.step(micro)
        except _OOM_ERRORS as exc:
            del micro
            self._free_after_oom()
            self.stream.seek(*start_pos)
            if self._adapt_to_oom():
                return True  # run the step again with the smaller micro-batch
            saved = None if self.dist.enabled else self.save()
            raise TrainingOOMError(self._oom_message(exc, saved)) from None
        del micro
        self.step += 1
        progress.pending.append(out.loss)
        progress.grad_norm = out.grad_norm
        self._after_step(progress, total, t0=t0, data_wait=data_wait)
        return True

    def _next_micro_batches(self) -> tuple[list[Batch], float]:
        """This step's micro-batches on the device, and the seconds spent waiting for them."""
        data_wait = 0.0
        micro: list[Batch] = []
        for _ in range(self.config.grad_accum):
            t = time.perf_counter()
            batch = self.stream.next()
            data_wait += time.perf_counter() - t
            micro.append(to_device(batch, self.device, non_blocking=True))
        return micro, data_wait

    def _after_step(self, progress: _Progress, total: int, *, t0: float, data_wait: float) -> None:
        """Account the step's time; log, evaluate and checkpoint where this step asks for it."""
        evaluate = self.step % self.training.eval_interval == 0 or self.step == total
        checkpoint = self.step % self.training.checkpoint_interval == 0
        # the loss is read (a device sync) only at log steps, and always before an
        # evaluation or a checkpoint, so that no checkpoint holds a diverged model
        log_now = (
            self.step % self.training.log_interval == 0
            or self.step == total
            or evaluate
            or checkpoint
        )
        values = self._read_pending(progress) if log_now else []
        dt = time.perf_counter() - t0
        progress.step_times.append(dt)
        interval = progress.interval
        interval["time"] += dt
        interval["data"] += data_wait
        interval["opt"] += self._opt_time
        interval["samples"] += (
            self.config.micro_batch * self.config.grad_accum * self.dist.world_size
        )
        if log_now:
            self._log_values(progress, values, total)
        else:
            self.display.advance(self.step)
        if values and not all(math.isfinite(v) for v in values):
            last = (
                f"; the last checkpoint is step {self.folder.last_saved}"
                if self.folder.last_saved
                else ""
            )
            raise AutotuneError(
                f"the training loss is not finite at step {self.step} ({values[-1]})"
                f"{last}; lower training.lr (--lr), use fp32 or bf16 rather than fp16, "
                "or check the data"
            )
        improved = False
        if evaluate:
            progress.last_eval = self._run_eval()
            improved = bool(progress.last_eval.get("improved"))
        if improved or checkpoint or self.step == total:
            self.save(best=improved)

    @staticmethod
    def _read_pending(progress: _Progress) -> list[float]:
        """The losses of the steps since the last read (this syncs the device)."""
        values: list[float] = torch.stack(progress.pending).float().cpu().tolist()
        progress.pending.clear()
        return values

    def _log_values(self, progress: _Progress, values: list[float], total: int) -> None:
        """Log the interval since the last log line, whose losses are ``values``."""
        progress.losses.extend(values)
        self._log_train(
            values, progress.interval, progress.tokens_per_sample, progress.grad_norm, total
        )
        progress.interval = _new_interval()

    def _stopped_early(self, total: int) -> str | None:
        """The signal's name when one stopped the run before ``total`` (after saving the
        step it reached); None when the run finished."""
        if self.step >= total:
            return None
        interrupted = signal.Signals(self._stop_signal or signal.SIGTERM).name
        if self.folder.last_saved != self.step:
            self.save()
        self.display.message(
            f"{interrupted}: stopped at step {self.step} of {total}; checkpoint "
            f"{self.folder.last_checkpoint}; continue with --resume auto"
        )
        return interrupted

    def _announce(self, resumed_from: Path | None, total: int) -> None:
        if not self.dist.is_main:
            return
        counts = self.spec.param_counts()
        cfg = self.config
        global_batch = cfg.micro_batch * cfg.grad_accum * self.dist.world_size
        tokens = global_batch * self.spec.tokens_per_sample(cfg.seq_len)
        for line in self.data.summary:
            self.display.message(line)
        self.display.message(
            f"model {self.spec.name}: {counts.total / 1e6:.2f}M parameters "
            f"({counts.non_embedding / 1e6:.2f}M non-embedding) on {self.device}"
            + (f" x {self.dist.world_size} processes" if self.dist.enabled else "")
            + (f" ({cfg.parallel.label()})" if self.dist.enabled and cfg.parallel else "")
        )
        self.display.message(
            f"config: micro_batch {cfg.micro_batch} x grad_accum {cfg.grad_accum}"
            + (f" x world {self.dist.world_size}" if self.dist.enabled else "")
            + f" = global batch {global_batch} ({tokens:,} {self.spec.throughput_unit}/step), "
            f"{self.spec.size_label(cfg.seq_len)}, {cfg.precision}, compile {cfg.compile}, "
            f"activation checkpointing {'on' if cfg.activation_checkpointing else 'off'}, "
            f"{cfg.num_workers} workers"
            + (", OpenMP threads spin (omp_spin)" if cfg.omp_spin else "")
            + f"; eval batch {2 * cfg.micro_batch}"
        )
        t = self.training
        self.display.message(
            f"training: {total} steps, AdamW lr {t.lr:g} ({t.schedule}, warm-up "
            f"{t.warmup_steps}, min ratio {t.min_lr_ratio:g}), weight decay {t.weight_decay:g}, "
            f"grad clip {t.grad_clip}, seed {t.seed}; out {self.out_dir}"
        )
        if resumed_from is not None:
            self.display.message(f"resumed from {resumed_from} at step {self.step}")

    def _mfu(self, samples_per_s: float) -> float | None:
        if self.caps is None:
            return None
        peak = self.caps.peak_flops(self.config.precision)
        if not peak:
            return None
        per_device = samples_per_s / self.dist.world_size
        return self.spec.flops_per_sample(self.config.seq_len) * per_device / peak

    def _log_train(
        self,
        values: list[float],
        interval: Mapping[str, float],
        tokens_per_sample: int,
        grad_norm: torch.Tensor | None,
        total: int,
    ) -> None:
        elapsed = max(interval["time"], 1e-9)
        samples_per_s = interval["samples"] / elapsed
        tokens_per_s = samples_per_s * tokens_per_sample
        mfu = self._mfu(samples_per_s)
        loss = sum(values) / len(values)
        n = len(values)
        record: dict[str, Any] = {
            "type": "train",
            "step": self.step,
            "epoch": self.stream.epoch,
            "loss": loss,
            "lr": float(self.scheduler.get_last_lr()[0]),
            "grad_norm": None if grad_norm is None else float(grad_norm.item()),
            "tokens_per_s": tokens_per_s,
            "samples_per_s": samples_per_s,
            "mfu": mfu,
            "step_time_s": elapsed / n,
            "data_wait_s": interval["data"] / n,
            "optimizer_s": interval["opt"] / n,
            "compute_s": max(0.0, elapsed - interval["data"] - interval["opt"]) / n,
        }
        self.display.log_train(
            record,
            total=total,
            rate=self.spec.pick_throughput(tokens_per_s, samples_per_s),
            label=self.spec.throughput_label,
        )

    def _run_eval(self) -> dict[str, Any]:
        result: dict[str, Any] | None = None
        if self.dist.is_main or self.sharded:  # sharded: every rank takes part in forwards
            try:
                result = self.evaluate()
            except _OOM_ERRORS:
                self._free_after_oom()
                self.display.message(
                    f"out of memory in evaluation with batch {self.eval_loader.batch_size}; "
                    f"evaluating with batch {self.config.micro_batch} from now on"
                )
                self.eval_loader = DataLoader(
                    self.data.val,
                    batch_size=self.config.micro_batch,
                    shuffle=False,
                    collate_fn=self.data.collate_fn,
                )
                result = self.evaluate()
            loss = float(result["loss"])
            result["improved"] = self.best_eval_loss is None or loss < self.best_eval_loss
            if result["improved"]:
                self.best_eval_loss = loss
        result = broadcast_object(self.dist, result)
        if result is None:  # pragma: no cover
            raise RuntimeError("rank 0 sent no evaluation result")
        if not self.dist.is_main:
            self.best_eval_loss = (
                float(result["loss"]) if result["improved"] else self.best_eval_loss
            )
        self.display.log_eval({"type": "eval", "step": self.step, **result})
        return result

    def _finish(
        self,
        *,
        start_step: int,
        total: int,
        losses: list[float],
        step_times: list[float],
        last_eval: dict[str, Any] | None,
        interrupted: str | None,
        wall_s: float,
    ) -> TrainResult:
        cfg = self.config
        samples_per_step = cfg.micro_batch * cfg.grad_accum * self.dist.world_size
        skip = max(1, min(10, len(step_times) // 10))  # warm-up (and compilation) steps
        steady = step_times[skip:]
        sps = samples_per_step * len(steady) / sum(steady) if steady and sum(steady) > 0 else None
        per_sample = self.spec.tokens_per_sample(cfg.seq_len)
        tps = None if sps is None else sps * per_sample
        median = statistics.median(steady) if steady else None
        median_tps = samples_per_step * per_sample / median if median else None
        result = TrainResult(
            out_dir=self.out_dir,
            start_step=start_step,
            steps=self.step,
            total_steps=total,
            losses=tuple(losses),
            eval=None if last_eval is None else {k: v for k, v in last_eval.items()},
            best_eval_loss=self.best_eval_loss,
            steady_tokens_per_s=self.spec.pick_throughput(tps, None),  # None: a samples/s model
            steady_samples_per_s=sps,
            mfu=None if sps is None else self._mfu(sps),
            interrupted=interrupted,
            checkpoint=self.folder.last_checkpoint,
            config=self.global_config,
            oom_adaptations=self.oom_adaptations,
            wall_s=wall_s,
            median_step_s=median,
            median_tokens_per_s=self.spec.pick_throughput(median_tps, None),
        )
        if self.dist.is_main:
            atomic_write_text(
                self.out_dir / "summary.json",
                json.dumps(result.to_dict(), indent=2, default=str) + "\n",
            )
            if sps is not None:
                rate = self.spec.pick_throughput(tps, sps)
                mfu = f", MFU {result.mfu:.1%}" if result.mfu is not None else ""
                best = "-" if self.best_eval_loss is None else f"{self.best_eval_loss:.4f}"
                self.display.message(
                    f"done: step {self.step}/{total} in {wall_s:.1f} s; steady {rate:,.0f} "
                    f"{self.spec.throughput_label}{mfu}; best val loss {best}; run folder "
                    f"{self.out_dir}"
                )
        return result


# -- the Python API -----------------------------------------------------------------------------


def train(
    spec: ModelSpec,
    config: TrainConfig,
    training: TrainingDefaults | None = None,
    *,
    data: str | Path | TrainData | None = None,
    out_dir: str | Path,
    device: str = "cpu",
    device_caps: DeviceCaps | None = None,
    resume: str | Path | None = None,
    on_oom: OnOOM = "fail",
    cache_dir: str | Path | None = None,
    text_column: str = "text",
    target_column: str = "target",
    json_logs: bool = False,
    progress: bool | None = None,
    echo: Callable[[str], None] | None = None,
    option_names: Mapping[str, str] | None = None,
) -> TrainResult:
    """Train ``spec`` with ``config`` (see ``Trainer``); under torchrun, as one rank of DDP.

    ``data``: a path (see autotune/data/tasks.py for the formats), prepared ``TrainData``, or
    None for the default corpus (language models only). ``option_names`` maps a parameter
    to the name errors give it (the CLI's flags: ``{"out_dir": "--out"}``).
    """
    training = training or TrainingDefaults()
    info, device = init_distributed(device)
    try:
        if isinstance(data, TrainData):
            prepared = data
        else:

            def load() -> TrainData:
                return load_data(
                    spec,
                    data,
                    seq_len=config.seq_len,
                    cache_dir=None if cache_dir is None else Path(cache_dir),
                    text_column=text_column,
                    target_column=target_column,
                    log=echo or (lambda s: print(s, file=sys.stderr, flush=True)),
                )

            if info.is_main:  # rank 0 writes the token cache, the others then read it
                prepared = load()
                barrier(info)
            else:
                barrier(info)
                prepared = load()
        trainer = Trainer(
            spec,
            config,
            training,
            prepared,
            out_dir,
            device=device,
            device_caps=device_caps,
            resume=resume,
            on_oom=on_oom,
            dist=info,
            json_logs=json_logs,
            progress=progress,
            echo=echo,
            option_names=option_names,
        )
        return trainer.run()
    finally:
        destroy_distributed(info)
