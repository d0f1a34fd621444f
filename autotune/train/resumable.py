"""Whether this run can continue a checkpoint: the same batches from its data position on.

A checkpoint keeps its data position (epoch, samples into it). From there a resumed run
reads the batches the checkpoint's run would have read only if the order and the cut of
the data are that run's: the seed (the order is a function of seed and epoch), the
sequence length (how text is cut into samples, and what every pipeline is asked for) and
the training split (its size in samples). A resume that changes one of them would mix two
data streams in one loss curve, so it is refused (``refuse_other_batches``), naming each
value, before the run folder is touched. The micro-batch may change (the position counts
samples, and running out of memory halves it), and so may the number of processes (state.py
says so). A field that a checkpoint of an earlier version lacks is not compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.errors import UsageError

if TYPE_CHECKING:
    from autotune.train.trainer import Trainer

__all__ = ["Change", "batch_changes", "refuse_other_batches"]


@dataclass(frozen=True, kw_only=True)
class Change:
    """A setting that decides the batches and differs from the checkpoint's: ``text`` says
    both values; ``keep`` is the override that keeps the checkpoint's (None: the data)."""

    text: str
    keep: str | None


def batch_changes(state: Mapping[str, Any], trainer: Trainer) -> list[Change]:
    """What would make ``trainer`` read other batches than the run of ``state`` (a
    checkpoint) from its data position on; empty when nothing would."""
    data = state.get("data") or {}
    changes = []
    seed = data.get("seed", (state.get("training") or {}).get("seed"))
    if seed is not None and int(seed) != trainer.training.seed:
        text = f"training.seed is {seed} in the checkpoint and {trainer.training.seed} in this run"
        changes.append(Change(text=text, keep=f"training.seed={seed}"))
    seq_len, now = (state.get("config") or {}).get("seq_len"), trainer.global_config.seq_len
    other_cut = seq_len is not None and int(seq_len) != now
    if other_cut:
        text = f"config.seq_len is {seq_len} in the checkpoint and {now} in this run"
        changes.append(Change(text=text, keep=f"config.seq_len={seq_len}"))
    samples = data.get("samples")  # text cut at another seq_len gives other samples: said
    if samples is not None and int(samples) != trainer.stream.samples and not other_cut:
        text = (
            f"the training data has {int(samples):,} samples in the checkpoint and "
            f"{trainer.stream.samples:,} in this run"
        )
        changes.append(Change(text=text, keep=None))
    return changes


def _keep_advice(changes: list[Change], trainer: Trainer) -> str:
    """How to keep the checkpoint's values: its overrides (the CLI: ``--set ...``), the
    same data."""
    flag = trainer.names.get("overrides")
    keeps = [f"{flag} {c.keep}" if flag else c.keep for c in changes if c.keep]
    ways = []
    if keeps:
        ways.append(f"the preset it was trained with, or {' '.join(keeps)}")
    if any(c.keep is None for c in changes):
        ways.append(f"the same {trainer.names.get('data', 'data')} as its run")
    return "; ".join(ways)


def refuse_other_batches(path: Path, state: Mapping[str, Any], trainer: Trainer) -> None:
    """Refuse (``UsageError``) to resume ``trainer`` from ``state``, the checkpoint ``path``,
    where it would read other batches than the checkpoint's run from its position on."""
    changes = batch_changes(state, trainer)
    if not changes:
        return
    data = state.get("data") or {}
    where = f"epoch {data.get('epoch')}, {data.get('offset')} samples into it"
    out = trainer.folder.out_name
    raise UsageError(
        f"cannot resume from {path}: this run would cut or order its training data otherwise "
        f"than the checkpoint's run ({'; '.join(c.text for c in changes)}), so continuing "
        f"at its data position ({where}) would mix two data streams in one loss curve. "
        f"Resume with the checkpoint's values ({_keep_advice(changes, trainer)}), or start "
        f"a new run from step 0 in a new folder ({out} NEW_FOLDER, without --resume)"
    )
