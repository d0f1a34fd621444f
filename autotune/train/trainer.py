"""The full training run: the burst's step function, for real, with data, eval, checkpoints.

``Trainer`` takes a model spec, a ``TrainConfig`` (how a step runs: what the search tuned),
the optimisation settings (``TrainingDefaults``: learning rate, schedule, intervals), the
data and an output folder; a preset is only where the CLI gets those from. Each optimizer
step is ``Stepper.step`` (autotune/engine/step.py) over ``grad_accum`` micro-batches: what the
bursts measured is what runs, built as the bursts built it (``autotune.engine.build``).
The class reads as the run does: set-up (``_setup_step``: the model, optimizer, schedule
and step function; ``_setup_data``), then the loop (``run``, ``_train_step``,
``_after_step``), then the result. Its parts live beside it: the
batch stream (batches.py), the run folder and its checkpoints (run_folder.py), what a
checkpoint holds (checkpoint_state.py), the learning-rate schedule (schedule.py),
evaluation (evaluation.py), the console and metrics output (log.py) and what it says
(progress.py), the stop signals (stop.py), out of memory (oom.py), the result (run_result.py);
``autotune.train.run.train`` is the run in one call.

The run folder (one run writes it at a time: run_folder.py) holds ``ckpt-step*.pt`` (the
last ``keep_last``), ``best.pt`` (lowest validation loss), ``tokenizer.json``, ``data.json``,
``metrics.jsonl`` (a JSON record per log line and evaluation), ``summary.json``, ``tb/``.

Determinism and resume: the data order is a function of ``(seed, epoch)`` only, the data
position (epoch, samples into it) and every RNG state are in each checkpoint, so a resumed
run continues the same loss curve as one never stopped (exactly, on CPU with
``num_workers=0``); a resume that would read other batches (another seed, sequence length
or training data) is refused (resumable.py).

Signals: SIGINT, SIGTERM or SIGHUP finishes the current step, saves a checkpoint and
returns with ``interrupted`` set (``TrainResult.exit_code``: 128 + the signal number;
stop.py); an error raised after one (workers of the loader or the compiler died of it) is
that stop. Out of memory: the last completed step is saved and
``TrainingOOMError`` says what to do, or with ``on_oom="adapt"`` the micro-batch halves,
the accumulation doubles (the global batch is unchanged) and the step is run again.
"""

from __future__ import annotations

import contextlib
import functools
import random
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from torch.utils.data import DataLoader

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import user_code
from autotune.core.errors import TrainingOOMError, UsageError
from autotune.core.signals import end_orphan_watch
from autotune.data.loader import loader_kwargs
from autotune.data.train_data import TrainData
from autotune.engine.build import build_training
from autotune.engine.distributed import (
    DistInfo,
    any_flag,
    broadcast_object,
    per_rank_config,
    rank_zero_first,
)
from autotune.engine.step import apply_allocator_settings, to_device
from autotune.engine.wrapping import full_state, is_sharded
from autotune.machine import omp
from autotune.models.registry import HF_PREFIX, is_user_code
from autotune.train.batches import BatchStream
from autotune.train.checkpoint_state import (
    RunStanding,
    TrainedParts,
    checkpoint_state,
    restore_state,
    schedule_changes,
)
from autotune.train.evaluation import evaluate_model, improves
from autotune.train.log import Display
from autotune.train.oom import OOM_ERRORS, free_after_oom, halved_batch, oom_message
from autotune.train.progress import (
    OptimizerTimer,
    TrainingProgress,
    check_finite,
    new_interval,
    opening_lines,
    train_record,
)
from autotune.train.resumable import (
    RunIdentity,
    foreign_checkpoints,
    refuse_other_batches,
    refuse_other_model,
)
from autotune.train.run_folder import RunFolder
from autotune.train.run_result import TrainResult, finish
from autotune.train.schedule import make_scheduler
from autotune.train.stop import StopSignals

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import LRScheduler

    from autotune.contract.spec import Batch, ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "OnOOM",
    "TrainResult",
    "Trainer",
    "TrainingDefaults",
    "TrainingOOMError",
]

OnOOM = Literal["fail", "adapt"]


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
        self.training = training
        self.data = data
        self.out_dir = Path(out_dir).expanduser()
        self.device = torch.device(device)
        self.caps = device_caps
        self.on_oom = on_oom
        self.resume = resume
        self.names = option_names or {}  # how errors name a parameter (the CLI: its flag)
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
        self.signals = StopSignals(self.display.message)
        self.folder = RunFolder(
            self.out_dir,
            dist=self.dist,
            keep_last=training.keep_last,
            message=self.display.message,
            option_names=option_names,
        )
        self.stream = BatchStream(data, config=self.config, seed=training.seed, dist=self.dist)
        # Each evaluation covers the first eval_batches x eval_batch validation samples: twice
        # the micro-batch the run started with, kept by its checkpoints, so that a smaller
        # micro-batch later (out of memory, a resume) compares the same samples for best.pt.
        self.eval_batch = 2 * self.config.micro_batch
        self.eval_loader = self._make_eval_loader()

    # -- set-up -----------------------------------------------------------------------------------
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

    def _make_eval_loader(self, batch_size: int | None = None) -> DataLoader[Any]:
        """The validation loader: batches of ``eval_batch`` (twice the training micro-batch:
        no gradients to keep), or of ``batch_size``, one of its divisors. It draws the seed
        of each pass from a generator of its own: an evaluation leaves the random stream
        of training (dropout) as it was, whatever the evaluation interval."""
        return DataLoader(
            self.data.val,
            batch_size=batch_size or self.eval_batch,
            shuffle=False,
            drop_last=False,
            num_workers=0,
            pin_memory=loader_kwargs(self.config)["pin_memory"],
            collate_fn=self.data.collate_fn,
            generator=torch.Generator(),
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
        self._setup_step()
        self._setup_hooks()
        # Per-rank randomness (dropout) after an identical initialisation everywhere.
        torch.manual_seed(seed + self.dist.rank)
        if resumed is not None:
            self._restore(resumed)
        self._setup_data()

    def _parts(self) -> TrainedParts:
        """What a checkpoint saves and a resume loads back into."""
        return TrainedParts(
            raw_model=self.raw_model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            stepper=self.stepper,
        )

    def _standing(self) -> RunStanding:
        return RunStanding(
            step=self.step,
            best_eval_loss=self.best_eval_loss,
            eval_batch=self.eval_batch,
            oom_adaptations=self.oom_adaptations,
        )

    def _restore(self, resumed: dict[str, Any]) -> None:
        """The checkpoint ``resumed`` into the built run (checkpoint_state.py), and where it
        stood."""
        standing = restore_state(
            resumed,
            self._parts(),
            stream=self.stream,
            sharded=self.sharded,
            model_name=self.spec.name,
            peak_lr=self.training.lr,
            tokenizer=self.data.tokenizer,
            dist=self.dist,
            message=self.display.message,
        )
        self.step, self.best_eval_loss = standing.step, standing.best_eval_loss
        self.eval_batch, self.oom_adaptations = standing.eval_batch, standing.oom_adaptations
        if (note := schedule_changes(resumed, self.training, self.names)) is not None:
            self.display.message(note)

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

    def _setup_step(self) -> None:
        """What a step runs on, built by the engine as the burst builds it
        (``autotune.engine.build``: backend flags, then the model, its wrapping, compile,
        the optimizer, the schedule and the step): ``raw_model`` (its state is what a
        checkpoint holds), ``model`` (the module a step runs: in DDP or sharded by FSDP2
        under torchrun, compiled per the config), ``optimizer``, ``scheduler`` and
        ``stepper``. A ``build_fn`` that fails is a ``ModelLoadError`` naming it
        (``user_code``)."""
        apply_allocator_settings(self.config)  # expandable segments, as the burst ran
        if (problem := omp.mismatch(self.config)) is not None:  # `autotune train` sets it
            self.display.message(f"warning: {problem}")
        t = self.training
        built = build_training(
            self.spec,
            self.config,
            self.device,
            world_size=self.dist.world_size,
            lr=t.lr,
            weight_decay=t.weight_decay,
            grad_clip=t.grad_clip,
            scheduler=self._setup_schedule,
            model_code=user_code(self.spec, "build_fn"),
        )
        self.raw_model, self.model = built.raw, built.model
        self.optimizer, self.stepper = built.optimizer, built.stepper

    def _setup_schedule(self, optimizer: torch.optim.Optimizer) -> LRScheduler:
        """``scheduler``, the learning-rate schedule of the training settings over
        ``optimizer`` (the engine's build calls it once the optimizer exists)."""
        t = self.training
        self.scheduler = make_scheduler(
            optimizer,
            warmup=t.warmup_steps,
            total=self.total_steps(),
            schedule=t.schedule,
            min_ratio=t.min_lr_ratio,
        )
        return self.scheduler

    def _setup_hooks(self) -> None:
        """Time ``optimizer.step`` (the log line's optimizer share)."""
        self.opt_timer = OptimizerTimer(self.optimizer)

    def _setup_data(self) -> None:
        """The loaders for the run's config (a checkpoint may have changed the micro-batch)."""
        self.stream.config = self.config
        self.eval_loader = self._make_eval_loader()

    # -- the loop ---------------------------------------------------------------------------------
    def run(self) -> TrainResult:
        t_start = time.perf_counter()
        with self.folder.locked():  # one writer per run folder, up to its summary
            start_step, total = self._start()
            progress = TrainingProgress(
                tokens_per_sample=self.spec.tokens_per_sample(self.config.seq_len)
            )
            if start_step >= total:  # a resume at (or past) the run's last step
                return self._nothing_to_train(progress, total, time.perf_counter() - t_start)
            self.signals.install()
            self.display.start(total, self.step)
            try:
                while self.step < total:
                    if any_flag(self.dist, self.signals.received is not None, self.device):
                        break
                    if not self._train_step(progress, total):
                        break
                # the steps since the last log line, when a signal stopped the loop
                if progress.pending:
                    self._log_values(progress, self._read_pending(progress), total)
            finally:
                self.signals.restore()
                end_orphan_watch()  # the loop is over: this rank finishes by itself
                self.stream.close()  # its workers end now, not at the interpreter's exit
                self.display.advance(self.step)
                self.display.close()
            return self._finish(
                progress,
                start_step=start_step,
                total=total,
                interrupted=self._stopped_early(total),
                wall_s=time.perf_counter() - t_start,
            )

    def _start(self) -> tuple[int, int]:
        """Prepare the run folder, build the run (from a checkpoint when resuming) and say
        what it is; returns the step it starts from and the total steps."""
        resumed = self.folder.find_resume(self.resume)
        if resumed:  # its model's weights, then its batches from its data position on
            refuse_other_model(*resumed, self._identity())
            refuse_other_batches(*resumed, self._identity())
        start = resumed[0] if resumed else None
        judge = functools.partial(foreign_checkpoints, self._identity())  # whose they are
        prepare = functools.partial(self.folder.prepare, start, judge=judge)
        rank_zero_first(self.dist, "to prepare the run folder", prepare)
        self._build(resumed[1] if resumed else None)
        if resumed:
            self.folder.resumed(resumed[0], self.step)
        total = self.total_steps()
        if self.dist.is_main:
            self.data.save(self.out_dir)
        self.display.open_metrics(truncate_after=self.step)
        self._announce(resumed[0] if resumed else None, total)
        return self.step, total

    def _identity(self) -> RunIdentity:
        """What a checkpoint is compared with (resumable.py)."""
        return RunIdentity(
            spec=self.spec,
            config=self.config,
            seed=self.training.seed,
            seq_len=self.global_config.seq_len,
            samples=self.stream.samples,
            tokenizer=self.data.tokenizer,
            folder=self.folder.path,
            out_name=self.folder.out_name,
            names=self.names,
        )

    def _nothing_to_train(
        self, progress: TrainingProgress, total: int, wall_s: float
    ) -> TrainResult:
        """The result of a resume whose checkpoint is at or past the run's last step: the
        run is done, and its summary.json keeps the figures of the steps it ran."""
        steps = self.names.get("max_steps", "max_steps")
        self.display.message(
            f"nothing to train: the checkpoint is at step {self.step} and this run ends at "
            f"step {total}, so {self.out_dir / 'summary.json'} is kept as it was; to train "
            f"further, give {steps} a number of steps above {self.step}"
        )
        self.stream.close()
        self.display.close()
        return self._finish(
            progress,
            start_step=self.step,
            total=total,
            interrupted=None,
            wall_s=wall_s,
            summary=False,
        )

    def _finish(
        self,
        progress: TrainingProgress,
        *,
        start_step: int,
        total: int,
        interrupted: str | None,
        wall_s: float,
        summary: bool = True,
    ) -> TrainResult:
        """The run's result (``finish``); rank 0 writes ``summary.json`` (with ``summary``)."""
        return finish(
            progress,
            spec=self.spec,
            config=self.config,
            global_config=self.global_config,
            caps=self.caps,
            world_size=self.dist.world_size,
            out_dir=self.out_dir,
            start_step=start_step,
            steps=self.step,
            total=total,
            best_eval_loss=self.best_eval_loss,
            checkpoint=self.folder.last_checkpoint,
            oom_adaptations=self.oom_adaptations,
            interrupted=interrupted,
            wall_s=wall_s,
            message=self.display.message if summary and self.dist.is_main else None,
            steps_synced=self.device.type != "cuda",
        )

    def _model_code(self) -> contextlib.AbstractContextManager[None]:
        """A user model's forward and loss run under ``user_code``: what they raise is a
        ModelLoadError naming the model (exit 2), not a traceback; so do a Hugging Face
        architecture's, whose config is the user's. A built-in model's failure is
        autotune's own bug, and keeps its traceback."""
        if is_user_code(self.spec.source) or self.spec.source.startswith(HF_PREFIX):
            return user_code(self.spec, "loss_fn")
        return contextlib.nullcontext()

    def _train_step(self, progress: TrainingProgress, total: int) -> bool:
        """One optimizer step, then its logging, evaluation and checkpoint; False when a
        stop signal ended it: what the data or the step raise after one is the stop's
        doing, never the model's (the step did not run)."""
        t0 = time.perf_counter()
        start_pos = (self.stream.epoch, self.stream.offset)
        try:
            micro, data_wait = self._next_micro_batches()
        except Exception:
            if self.signals.received is None:
                raise
            self.stream.seek(*start_pos)  # the workers died of the signal too
            return False
        self.opt_timer.seconds = 0.0
        try:
            with self._model_code():
                out = self.stepper.step(micro)
        except Exception as exc:
            del micro
            if self.signals.received is not None:  # e.g. the compiler's workers died of it
                self.stream.seek(*start_pos)
                return False
            if not isinstance(exc, OOM_ERRORS):
                raise
            free_after_oom(self.optimizer, self.device)
            self.stream.seek(*start_pos)
            if self._adapt_to_oom():
                return True  # run the step again with the smaller micro-batch
            saved = None if self.dist.enabled else self.save()
            raise TrainingOOMError(oom_message(self.config, self.step + 1, exc, saved)) from None
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

    def _after_step(
        self, progress: TrainingProgress, total: int, *, t0: float, data_wait: float
    ) -> None:
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
        interval["opt"] += self.opt_timer.seconds
        interval["samples"] += (
            self.config.micro_batch * self.config.grad_accum * self.dist.world_size
        )
        if log_now:
            self._log_values(progress, values, total)
        else:
            self.display.advance(self.step)
        saved, precision = self.folder.last_saved, self.config.precision
        check_finite(values, step=self.step, last_saved=saved, precision=precision)
        improved = False
        if evaluate:
            progress.last_eval = self._run_eval()
            improved = bool(progress.last_eval.get("improved"))
        if improved or checkpoint or self.step == total:
            self.save(best=improved)

    @staticmethod
    def _read_pending(progress: TrainingProgress) -> list[float]:
        """The losses of the steps since the last read (this syncs the device)."""
        values: list[float] = torch.stack(progress.pending).float().cpu().tolist()
        progress.pending.clear()
        return values

    def _log_values(self, progress: TrainingProgress, values: list[float], total: int) -> None:
        """Log the interval since the last log line, whose losses are ``values``."""
        progress.losses.extend(values)
        self._log_train(
            values, progress.interval, progress.tokens_per_sample, progress.grad_norm, total
        )
        progress.interval = new_interval()

    def _stopped_early(self, total: int) -> str | None:
        """The signal's name when one stopped the run before ``total`` (after saving the
        step it reached); None when the run finished."""
        if self.step >= total:
            return None
        interrupted = signal.Signals(self.signals.received or signal.SIGTERM).name
        if self.folder.last_saved != self.step:
            self.save()
        self.display.message(
            f"{interrupted}: stopped at step {self.step} of {total}; checkpoint "
            f"{self.folder.last_checkpoint}; continue with --resume auto"
        )
        return interrupted

    # -- checkpoints, evaluation, out of memory ---------------------------------------------------
    def save(self, *, best: bool = False) -> Path | None:
        """Checkpoint the current step (collective under DDP: every rank must call it).
        Under FSDP every rank first gathers the whole state (a collective too)."""
        full = full_state(self.raw_model, self.optimizer) if self.sharded else None
        parts, standing = self._parts(), self._standing()

        def state(rngs: Sequence[Any]) -> dict[str, Any]:
            return checkpoint_state(
                parts,
                standing,
                rngs,
                full,
                stream=self.stream,
                spec=self.spec,
                global_config=self.global_config,
                training=self.training,
                tokenizer=self.data.tokenizer,
                world_size=self.dist.world_size,
            )

        return self.folder.save(self.step, state, best=best)

    def evaluate(self) -> dict[str, Any]:
        """Validation loss (and the model's metric) over ``eval_batches`` batches of
        ``eval_batch`` samples, with a sample of text from a language model."""
        batch = self.eval_loader.batch_size or self.eval_batch  # eval_batch or a divisor
        return evaluate_model(
            self.raw_model,
            self.eval_loader,
            self.data,
            spec=self.spec,
            config=self.config,
            device=self.device,
            max_batches=self.training.eval_batches * self.eval_batch // batch,
            seed=self.training.seed,
        )

    def _run_eval(self) -> dict[str, Any]:
        result: dict[str, Any] | None = None
        if self.dist.is_main or self.sharded:  # sharded: every rank takes part in forwards
            try:
                result = self.evaluate()
            except OOM_ERRORS:
                batch = self.eval_loader.batch_size or self.eval_batch
                smaller = max((d for d in range(1, batch) if self.eval_batch % d == 0), default=1)
                free_after_oom(self.optimizer, self.device)
                self.display.message(
                    f"out of memory in evaluation with batch {batch}; evaluating the same "
                    f"samples in batches of {smaller} from now on"
                )
                self.eval_loader = self._make_eval_loader(smaller)
                result = self.evaluate()
            loss = float(result["loss"])
            result["improved"] = improves(loss, self.best_eval_loss)
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

    def _adapt_to_oom(self) -> bool:
        """Halve the micro-batch and double the accumulation; False when impossible."""
        cfg = self.config
        if self.on_oom != "adapt" or self.dist.enabled or cfg.micro_batch < 2:
            return False
        new = halved_batch(cfg)
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
        return True

    # -- what the run says, and its result --------------------------------------------------------
    def _announce(self, resumed_from: Path | None, total: int) -> None:
        if not self.dist.is_main:
            return
        opening = opening_lines(
            self.spec,
            self.config,
            self.training,
            total=total,
            world_size=self.dist.world_size,
            device=self.device,
            eval_batch=self.eval_batch,
            out_dir=self.out_dir,
        )
        for line in [*self.data.summary, *opening]:
            self.display.message(line)
        if resumed_from is not None:
            self.display.message(f"resumed from {resumed_from} at step {self.step}")

    def _log_train(
        self,
        values: list[float],
        interval: Mapping[str, float],
        tokens_per_sample: int,
        grad_norm: torch.Tensor | None,
        total: int,
    ) -> None:
        record = train_record(
            values,
            interval,
            step=self.step,
            epoch=self.stream.epoch,
            lr=float(self.scheduler.get_last_lr()[0]),
            grad_norm=grad_norm,
            tokens_per_sample=tokens_per_sample,
            spec=self.spec,
            config=self.config,
            caps=self.caps,
            world_size=self.dist.world_size,
        )
        self.display.log_train(
            record,
            total=total,
            rate=self.spec.pick_throughput(record["tokens_per_s"], record["samples_per_s"]),
            label=self.spec.throughput_label,
        )
