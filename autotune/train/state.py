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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from autotune.engine.parallel import load_full_state
from autotune.train.checkpoint import CheckpointError, restore_rng_state
from autotune.train.schedule import set_peak_lr

if TYPE_CHECKING:
    from autotune.train.trainer import Trainer

__all__ = ["CHECKPOINT_FORMAT", "checkpoint_state", "plain", "restore_state"]

CHECKPOINT_FORMAT = 1


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


def checkpoint_state(
    trainer: Trainer,
    rngs: Sequence[Any],
    full: tuple[dict[str, Any], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The checkpoint of ``trainer`` at its current step; ``rngs``: every rank's RNG
    states; ``full``: the model's and optimizer's gathered state (FSDP), else their own."""
    tokenizer = trainer.data.tokenizer
    return {
        "format": CHECKPOINT_FORMAT,
        "step": trainer.step,
        "model": full[0] if full else trainer.raw_model.state_dict(),
        "optimizer": full[1] if full else trainer.optimizer.state_dict(),
        "scheduler": trainer.scheduler.state_dict(),
        "stepper": trainer.stepper.state_dict(),
        "rng": list(rngs),
        "data": {
            "epoch": trainer.stream.epoch,
            "offset": trainer.stream.offset,
            "world_size": trainer.dist.world_size,
            "seed": trainer.training.seed,
            "samples": trainer.stream.samples,  # the training split's size
        },
        "config": plain(trainer.global_config.to_dict()),
        "training": plain(dataclasses.asdict(trainer.training)),
        "model_name": trainer.spec.name,
        "model_source": trainer.spec.source,
        "model_args": plain(dict(trainer.spec.args)),
        "best_eval_loss": trainer.best_eval_loss,
        "eval_batch": trainer.eval_batch,
        "oom_adapted": trainer.oom_adaptations > 0,
        "oom_adaptations": trainer.oom_adaptations,
        "tokenizer": None if tokenizer is None else plain(tokenizer.to_dict()),
        "torch_version": str(torch.__version__),
    }


def _load_weights(trainer: Trainer, state: dict[str, Any]) -> None:
    """The model's (and under FSDP the optimizer's) state, or a CheckpointError saying
    which model the checkpoint was written for."""
    try:
        if trainer.sharded:  # every rank loads the whole state into its shards
            load_full_state(
                trainer.raw_model, trainer.optimizer, state["model"], state["optimizer"]
            )
        else:
            trainer.raw_model.load_state_dict(state["model"])
    except (RuntimeError, KeyError) as exc:
        raise CheckpointError(
            f"the checkpoint does not fit model {trainer.spec.name!r} with these args "
            f"(it was written for {state.get('model_name')!r} "
            f"{state.get('model_args')}): {_mismatch(exc)}"
        ) from None
    if not trainer.sharded:
        trainer.optimizer.load_state_dict(state["optimizer"])


def _mismatch(exc: Exception, limit: int = 240) -> str:
    """torch's reason a state dict does not fit, one line: its header ("Error(s) in
    loading state_dict for MU:") with the first line after it, cut at ``limit``."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = " ".join(lines[:2]) if lines and lines[0].endswith(":") else (lines or [""])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def restore_state(trainer: Trainer, state: dict[str, Any]) -> None:
    """``state`` (a checkpoint) into ``trainer``, built for it: weights, optimizer,
    schedule (with this run's peak learning rate), step function, RNGs, data position,
    step, best validation loss. The tokenizer must be the checkpoint's."""
    _load_weights(trainer, state)
    trainer.scheduler.load_state_dict(state["scheduler"])
    set_peak_lr(trainer.scheduler, trainer.training.lr)  # --lr, --max-steps may change them
    trainer.stepper.load_state_dict(state["stepper"])
    saved_tok = state.get("tokenizer")
    tokenizer = trainer.data.tokenizer
    if saved_tok is not None and tokenizer is not None and saved_tok != plain(tokenizer.to_dict()):
        raise CheckpointError(
            "the checkpoint was trained with a different tokenizer or vocabulary than "
            "this data gives (see tokenizer.json in the run folder); resume with the "
            "same --data"
        )
    dist = trainer.dist
    rngs = state["rng"]
    if len(rngs) != dist.world_size:
        trainer.display.message(
            f"note: the checkpoint was written by {len(rngs)} process(es), this run has "
            f"{dist.world_size}: random streams and data order per process differ "
            "from the original run"
        )
    restore_rng_state(rngs[dist.rank % len(rngs)])
    data = state["data"]
    trainer.stream.seek(int(data["epoch"]), int(data["offset"]))
    trainer.step = int(state["step"])
    best = state.get("best_eval_loss")
    trainer.best_eval_loss = None if best is None else float(best)
    # the samples its evaluations covered (before this field: twice its micro-batch)
    trainer.eval_batch = int(state.get("eval_batch") or 2 * int(state["config"]["micro_batch"]))
    trainer.oom_adaptations = int(state.get("oom_adaptations", 0))
