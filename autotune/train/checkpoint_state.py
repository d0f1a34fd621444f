"""What a checkpoint of a training run holds, and how a resumed run takes it back.

A checkpoint is plain data (loadable with ``weights_only``): the model's and the
optimizer's state (gathered whole under FSDP), the schedule, the step function's state
(the fp16 scaler), every rank's RNG states, the data position (epoch, samples into it)
with the seed and the training split's size (with the config's sequence length, what
decides the batches from there: resumable.py), the config the run had reached, the
training settings, the model's name and arguments, the tokenizer, the best validation
loss, the evaluation batch (which validation samples an evaluation covers) and the
out-of-memory adaptations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from autotune.engine.wrapping import load_full_model_state, load_full_optimizer_state
from autotune.train.checkpoint import CHECKPOINT_FORMAT, CheckpointError, restore_rng_state
from autotune.train.schedule import set_peak_lr

if TYPE_CHECKING:
    from torch import nn
    from torch.optim.lr_scheduler import LambdaLR

    from autotune.config.train_config import TrainConfig, TrainingDefaults
    from autotune.contract.spec import ModelSpec
    from autotune.data.tokenizer import ByteTokenizer, WordVocab
    from autotune.engine.distributed import DistInfo
    from autotune.engine.step import Stepper
    from autotune.train.batches import BatchStream

__all__ = [
    "CHECKPOINT_FORMAT",
    "RunStanding",
    "TrainedParts",
    "checkpoint_state",
    "plain",
    "restore_state",
]


def plain(value: Any) -> Any:
    """``value`` as weights_only-loadable plain data (unknown objects become text)."""
    if value is None:
        return None
    for kind in (bool, int, float, str):  # exact types: subclasses (numpy, TorchVersion) are
        if isinstance(value, kind):  # not weights_only-loadable
            return kind(value)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return str(value)


@dataclass(frozen=True, kw_only=True)
class TrainedParts:
    """What a checkpoint saves and a resume loads back into: the model as built, its
    optimizer, the learning-rate schedule and the step function (its fp16 scaler)."""

    raw_model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: LambdaLR
    stepper: Stepper


@dataclass(frozen=True, kw_only=True)
class RunStanding:
    """Where a run stands: its step, its best validation loss, the evaluation batch (which
    validation samples an evaluation covers) and its out-of-memory adaptations."""

    step: int
    best_eval_loss: float | None
    eval_batch: int
    oom_adaptations: int


def checkpoint_state(
    parts: TrainedParts,
    standing: RunStanding,
    rngs: Sequence[Any],
    full: tuple[dict[str, Any], dict[str, Any]] | None = None,
    *,
    stream: BatchStream,
    spec: ModelSpec,
    global_config: TrainConfig,
    training: TrainingDefaults,
    tokenizer: ByteTokenizer | WordVocab | None,
    world_size: int,
) -> dict[str, Any]:
    """The checkpoint of a run of ``spec`` (``global_config``, ``training``, on
    ``world_size`` processes, reading ``stream``) at ``standing``; ``rngs``: every rank's
    RNG states; ``full``: the model's and optimizer's gathered state (FSDP), else
    ``parts``' own."""
    return {
        "format": CHECKPOINT_FORMAT,
        "step": standing.step,
        "model": full[0] if full else parts.raw_model.state_dict(),
        "optimizer": full[1] if full else parts.optimizer.state_dict(),
        "scheduler": parts.scheduler.state_dict(),
        "stepper": parts.stepper.state_dict(),
        "rng": list(rngs),
        "data": {
            "epoch": stream.epoch,
            "offset": stream.offset,
            "world_size": world_size,
            "seed": training.seed,
            "samples": stream.samples,  # the training split's size
        },
        "config": plain(global_config.to_dict()),
        "training": plain(dataclasses.asdict(training)),
        "model_name": spec.name,
        "model_source": spec.source,
        "model_args": plain(dict(spec.args)),
        "best_eval_loss": standing.best_eval_loss,
        "eval_batch": standing.eval_batch,
        "oom_adapted": standing.oom_adaptations > 0,
        "oom_adaptations": standing.oom_adaptations,
        "tokenizer": None if tokenizer is None else plain(tokenizer.to_dict()),
        "torch_version": str(torch.__version__),
    }


def _load_weights(
    parts: TrainedParts, state: dict[str, Any], *, sharded: bool, model_name: str
) -> None:
    """The model's and the optimizer's state, or a CheckpointError saying which model the
    checkpoint was written for, or that its optimizer is another. Under FSDP every rank
    loads the whole state into its shards, a checkpoint of one process or of DDP too."""
    model = parts.raw_model
    try:
        if sharded:
            load_full_model_state(model, state["model"])
        else:
            model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(
            f"the checkpoint does not fit model {model_name!r} with these args "
            f"(it was written for {state.get('model_name')!r} "
            f"{state.get('model_args')}): {_mismatch(exc)}"
        ) from None
    try:
        if sharded:
            load_full_optimizer_state(model, parts.optimizer, state["optimizer"])
        else:
            parts.optimizer.load_state_dict(state["optimizer"])
        _check_optimizer_shapes(parts.optimizer)
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            "the checkpoint's optimizer state does not fit this run's optimizer (another "
            f"optimizer or other parameters): {_mismatch(exc)}; resume with the settings "
            "it was written with, or start afresh in a new --out"
        ) from None


def _check_optimizer_shapes(optimizer: torch.optim.Optimizer) -> None:
    """A ``ValueError`` where a parameter's loaded state holds a tensor of another shape
    than the parameter's (AdamW's moments are its shape; its step count is a scalar):
    torch loads such a state without a word, and the first step failed with a shape error
    and a traceback."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise ValueError(
                        f"its {key!r} of shape {tuple(value.shape)} is for a parameter of "
                        f"shape {tuple(param.shape)}"
                    )


def _load_part(name: str, load: Callable[[], Any]) -> None:
    """``load()``, the checkpoint's state of the run's ``name`` (its schedule, its step
    function), or a CheckpointError saying it does not fit: a scheduler state without its
    keys was a KeyError traceback."""
    try:
        load()
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CheckpointError(
            f"the checkpoint's {name} state does not fit this run ({type(exc).__name__}: "
            f"{_mismatch(exc)}): it was not written by autotune train, or was changed since; "
            "resume from another checkpoint, or start afresh in a new --out"
        ) from None


def _mismatch(exc: Exception, limit: int = 240) -> str:
    """torch's reason a state dict does not fit, one line: its header ("Error(s) in
    loading state_dict for MU:") with the first line after it, cut at ``limit``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines or [""])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


# The training settings that shape the learning-rate schedule a resume continues.
SCHEDULE_FIELDS = ("lr", "schedule", "warmup_steps", "min_lr_ratio", "max_steps", "epochs")


def schedule_changes(
    state: Mapping[str, Any], training: TrainingDefaults, names: Mapping[str, str]
) -> str | None:
    """A note where this run's schedule settings differ from those of the run that wrote
    checkpoint ``state`` (``--max-steps 210`` after a run of 300 recomputes the cosine
    decay from the step it resumes at), each named as ``names`` says (the CLI: its flag);
    None where they are the same, or the checkpoint does not say."""
    saved = state.get("training")
    if not isinstance(saved, Mapping):
        return None
    now = dataclasses.asdict(training)
    changed = [
        f"{names.get(name, name)} {saved[name]} -> {now[name]}"
        for name in SCHEDULE_FIELDS
        if name in saved and saved[name] != now[name]
    ]
    if not changed:
        return None
    return (
        "note: the learning-rate schedule differs from the checkpoint's run "
        f"({', '.join(changed)}): from step {state['step']} the rate follows this run's schedule"
    )


def restore_state(
    state: dict[str, Any],
    parts: TrainedParts,
    *,
    stream: BatchStream,
    sharded: bool,
    model_name: str,
    peak_lr: float,
    tokenizer: ByteTokenizer | WordVocab | None,
    dist: DistInfo,
    message: Callable[[str], None],
) -> RunStanding:
    """``state`` (a checkpoint) into ``parts``, built for it: weights, optimizer,
    schedule (with this run's ``peak_lr``), step function; then the RNGs and the data
    position (``stream``). Returns where the run stands: step, best validation loss,
    evaluation batch, out-of-memory adaptations. The tokenizer must be the checkpoint's."""
    _load_weights(parts, state, sharded=sharded, model_name=model_name)

    def schedule() -> None:
        parts.scheduler.load_state_dict(state["scheduler"])
        set_peak_lr(parts.scheduler, peak_lr)  # --lr, --max-steps may change them

    _load_part("learning-rate schedule", schedule)
    _load_part("step function", lambda: parts.stepper.load_state_dict(state["stepper"]))
    saved_tok = state.get("tokenizer")
    if saved_tok is not None and tokenizer is not None and saved_tok != plain(tokenizer.to_dict()):
        raise CheckpointError(
            "the checkpoint was trained with a different tokenizer or vocabulary than "
            "this data gives (see tokenizer.json in the run folder); resume with the "
            "same --data"
        )
    rngs = state["rng"]
    if len(rngs) != dist.world_size:
        message(
            f"note: the checkpoint was written by {len(rngs)} process(es), this run has "
            f"{dist.world_size}: random streams and data order per process differ "
            "from the original run"
        )
    restore_rng_state(rngs[dist.rank % len(rngs)])
    data = state["data"]
    stream.seek(int(data["epoch"]), int(data["offset"]))
    best = state.get("best_eval_loss")
    best = None if best is None else float(best)
    return RunStanding(
        step=int(state["step"]),
        best_eval_loss=best if best is not None and math.isfinite(best) else None,  # nan: none
        # the samples its evaluations covered (before this field: twice its micro-batch)
        eval_batch=int(state.get("eval_batch") or 2 * int(state["config"]["micro_batch"])),
        oom_adaptations=int(state.get("oom_adaptations", 0)),
    )
