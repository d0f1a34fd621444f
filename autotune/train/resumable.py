"""Whether this run can continue a checkpoint: the same batches from its data position on,
and (for a folder's checkpoints met by a fresh run) the same model.

A checkpoint keeps its data position (epoch, samples into it). From there a resumed run
reads the batches the checkpoint's run would have read only if the order and the cut of
the data are that run's: the seed (the order is a function of seed and epoch), the
sequence length (how text is cut into samples, and what every pipeline is asked for) and
the training split (its size in samples). A resume that changes one of them would mix two
data streams in one loss curve, so it is refused (``refuse_other_batches``), naming each
value, before the run folder is touched. The micro-batch may change (the position counts
samples, and running out of memory halves it), and so may the number of processes
(checkpoint_state.py says so). A field that a checkpoint of an earlier version lacks is not
compared.

A fresh run into a folder that holds checkpoints is refused by the run folder (run_folder.py);
``foreign_checkpoints`` says why when this run could not simply continue them: another
model's, other weights, another tokenizer, other batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from autotune.core.errors import CheckpointError, UsageError
from autotune.engine.step import prepare_model
from autotune.train.checkpoint_state import plain

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.data.tokenizer import ByteTokenizer, WordVocab

__all__ = [
    "Change",
    "RunIdentity",
    "batch_changes",
    "foreign_checkpoints",
    "refuse_other_batches",
    "refuse_other_model",
]


@dataclass(frozen=True, kw_only=True)
class RunIdentity:
    """What a checkpoint is compared with: this run's model (``spec``, built with
    ``config``, one process's), what decides its batches (``seed``, ``seq_len``, the
    training split's size in ``samples``), its ``tokenizer``, and how the refusals name
    things (the run ``folder``, its option ``out_name``, the options' names: ``names``)."""

    spec: ModelSpec
    config: TrainConfig
    seed: int
    seq_len: int
    samples: int
    tokenizer: ByteTokenizer | WordVocab | None
    folder: Path
    out_name: str
    names: Mapping[str, str]


@dataclass(frozen=True, kw_only=True)
class Change:
    """A setting that decides the batches and differs from the checkpoint's: ``text`` says
    both values; ``keep`` is the override that keeps the checkpoint's (None: the data)."""

    text: str
    keep: str | None


def batch_changes(state: Mapping[str, Any], run: RunIdentity) -> list[Change]:
    """What would make ``run`` read other batches than the run of ``state`` (a
    checkpoint) from its data position on; empty when nothing would."""
    data = state.get("data") or {}
    changes = []
    seed = data.get("seed", (state.get("training") or {}).get("seed"))
    if seed is not None and int(seed) != run.seed:
        text = f"training.seed is {seed} in the checkpoint and {run.seed} in this run"
        changes.append(Change(text=text, keep=f"training.seed={seed}"))
    seq_len, now = (state.get("config") or {}).get("seq_len"), run.seq_len
    other_cut = seq_len is not None and int(seq_len) != now
    if other_cut:
        text = f"config.seq_len is {seq_len} in the checkpoint and {now} in this run"
        changes.append(Change(text=text, keep=f"config.seq_len={seq_len}"))
    samples = data.get("samples")  # text cut at another seq_len gives other samples: said
    if samples is not None and int(samples) != run.samples and not other_cut:
        text = (
            f"the training data has {int(samples):,} samples in the checkpoint and "
            f"{run.samples:,} in this run"
        )
        changes.append(Change(text=text, keep=None))
    return changes


def _keep_advice(changes: list[Change], run: RunIdentity) -> str:
    """How to keep the checkpoint's values: its overrides (the CLI: ``--set ...``), the
    same data."""
    flag = run.names.get("overrides")
    keeps = [f"{flag} {c.keep}" if flag else c.keep for c in changes if c.keep]
    ways = []
    if keeps:
        ways.append(f"the preset it was trained with, or {' '.join(keeps)}")
    if any(c.keep is None for c in changes):
        ways.append(f"the same {run.names.get('data', 'data')} as its run")
    return "; ".join(ways)


def refuse_other_batches(path: Path, state: Mapping[str, Any], run: RunIdentity) -> None:
    """Refuse (``UsageError``) to resume ``run`` from ``state``, the checkpoint ``path``,
    where it would read other batches than the checkpoint's run from its position on."""
    changes = batch_changes(state, run)
    if not changes:
        return
    data = state.get("data") or {}
    where = f"epoch {data.get('epoch')}, {data.get('offset')} samples into it"
    out = run.out_name
    raise UsageError(
        f"cannot resume from {path}: this run would cut or order its training data otherwise "
        f"than the checkpoint's run ({'; '.join(c.text for c in changes)}), so continuing "
        f"at its data position ({where}) would mix two data streams in one loss curve. "
        f"Resume with the checkpoint's values ({_keep_advice(changes, run)}), or start "
        f"a new run from step 0 in a new folder ({out} NEW_FOLDER, without --resume)"
    )


def refuse_other_model(path: Path, state: Mapping[str, Any], run: RunIdentity) -> None:
    """Refuse (``CheckpointError``) to resume ``run`` from ``state``, the checkpoint
    ``path``, where it holds another model's weights: said before the data is compared,
    whose advice (another seq_len) would only lead to this refusal next."""
    name = state.get("model_name")
    if name is not None and name != run.spec.name:
        what = f"a checkpoint of model {name!r}, and this run trains model {run.spec.name!r}"
    elif not _weights_fit(state.get("model") or {}, run):
        what = (
            f"a checkpoint of model {name or run.spec.name!r} with other weights than this "
            f"run's ({_args_diff(state, run)})"
        )
    else:
        return
    raise CheckpointError(
        f"cannot resume from {path}: it is {what}; resume from a checkpoint of this model, "
        f"or train into a new folder with {run.out_name}"
    )


def foreign_checkpoints(run: RunIdentity, path: Path, state: Mapping[str, Any]) -> str | None:
    """Why a fresh ``run`` must not be told to continue the checkpoints of its
    folder (``path``, the latest that loads, holding ``state``): the refusal to give
    instead, or None where ``--resume auto`` would continue them."""
    folder, out = run.folder, run.out_name
    latest = f"latest {path.name}, step {state.get('step')}"
    name = state.get("model_name")
    if name is not None and name != run.spec.name:
        return (
            f"{folder} already holds checkpoints of model {name!r} ({latest}), and this run "
            f"trains model {run.spec.name!r}: train into a new folder with {out}"
        )
    if not _weights_fit(state.get("model") or {}, run):
        return (
            f"{folder} already holds checkpoints of model {name or run.spec.name!r} with "
            f"other weights than this run's ({_args_diff(state, run)}; {latest}), which "
            f"this run cannot continue: train into a new folder with {out}"
        )
    tokenizer = run.tokenizer
    saved_tokenizer = state.get("tokenizer")
    ours = None if tokenizer is None else plain(tokenizer.to_dict())
    if None not in (ours, saved_tokenizer) and saved_tokenizer != ours:
        return (
            f"{folder} already holds checkpoints of a run ({latest}) with another tokenizer "
            f"or vocabulary than this data gives, which this run cannot continue: train "
            f"into a new folder with {out}"
        )
    changes = batch_changes(state, run)
    if changes:
        return (
            f"{folder} already holds checkpoints of a run ({latest}) that read its data "
            f"otherwise: {'; '.join(c.text for c in changes)}. Continue it with --resume "
            f"auto and its values ({_keep_advice(changes, run)}), or train into a new "
            f"folder with {out}"
        )
    return None


def _weights_fit(saved: Mapping[str, Any], run: RunIdentity) -> bool:
    """Whether the checkpoint's weights ``saved`` have this run's model's names and shapes
    (the model built on the meta device: no memory, no data). A model that cannot be
    built there is taken to fit: the resume itself then says whether it does."""
    try:
        with torch.device("meta"):
            model = prepare_model(run.spec, run.config, torch.device("meta"))
        ours = model.state_dict()
    except Exception:  # user code that needs real tensors to build
        return True
    return {k: tuple(getattr(v, "shape", ())) for k, v in saved.items()} == {
        k: tuple(getattr(v, "shape", ())) for k, v in ours.items()
    }


def _args_diff(state: Mapping[str, Any], run: RunIdentity) -> str:
    """The model arguments that differ, as ``name X there, Y here``."""
    saved = state.get("model_args") or {}
    ours = plain(dict(run.spec.args))
    diff = [
        f"{key} {saved.get(key)} there, {ours.get(key)} here"
        for key in sorted(set(saved) | set(ours))
        if saved.get(key) != ours.get(key)
    ]
    return "args " + ", ".join(diff) if diff else "the same args, another config"
