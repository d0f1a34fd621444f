"""What the trainer takes from any data source (``TrainData``), and the defaults every
source shares: the validation fraction and the quiet log.

The corpora, the per-task preparers and a model's own pipeline all return a ``TrainData``;
this module imports none of them, so each of them can import it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.files import atomic_write_text

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from autotune.contract.spec import Batch
    from autotune.data.token_cache import DataStats
    from autotune.data.tokenizer import ByteTokenizer, WordVocab

__all__ = ["VAL_FRACTION", "Log", "TrainData", "quiet"]

VAL_FRACTION = 0.1

Log = Callable[[str], None]


def quiet(_: str) -> None:
    return None


@dataclass(kw_only=True)
class TrainData:
    """What the trainer needs from the data: datasets, how to decode, what to save."""

    train: Dataset[Batch]
    val: Dataset[Batch]
    tokenizer: ByteTokenizer | WordVocab | None
    stats: DataStats | None = None
    summary: list[str] = field(default_factory=list)  # lines to print
    spec_args: dict[str, Any] = field(default_factory=dict)  # model args the data sets
    extra: dict[str, Any] = field(default_factory=dict)  # saved to data.json
    collate_fn: Callable[[list[Batch]], Batch] | None = None

    def save(self, out_dir: Path) -> None:
        """``tokenizer.json`` (and ``data.json``) next to the checkpoints."""
        if self.tokenizer is not None:
            self.tokenizer.save(out_dir / "tokenizer.json")
        info: dict[str, Any] = dict(self.extra)
        if self.stats is not None:
            info["stats"] = self.stats.to_dict()
        atomic_write_text(out_dir / "data.json", json.dumps(info, indent=2, default=str) + "\n")
