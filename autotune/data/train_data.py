"""What the trainer takes from any data source (``TrainData``, with its ``DataStats``), and
the defaults every source shares: the validation fraction and the quiet log.

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
from autotune.core.plain import to_plain

if TYPE_CHECKING:
    from torch.utils.data import Dataset

    from autotune.contract.spec import Batch
    from autotune.data.tokenizer import ByteTokenizer, WordVocab

__all__ = ["VAL_FRACTION", "DataStats", "Log", "TrainData", "quiet"]

VAL_FRACTION = 0.1

Log = Callable[[str], None]


def quiet(_: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class DataStats:
    """What a corpus held once tokenized and split: the lines a run prints, data.json's."""

    documents: int
    train_documents: int
    val_documents: int
    train_tokens: int
    val_tokens: int
    min_doc_tokens: int
    avg_doc_tokens: float
    max_doc_tokens: int
    train_chunks: int = 0
    val_chunks: int = 0
    source: str = ""
    cached: bool = False

    def lines(self) -> list[str]:
        where = "token cache hit" if self.cached else "tokenized"
        return [
            f"data: {self.source} ({where})",
            f"  documents: {self.documents} ({self.train_documents} train, "
            f"{self.val_documents} validation)",
            f"  tokens: {self.train_tokens + self.val_tokens:,} ({self.train_tokens:,} train, "
            f"{self.val_tokens:,} validation)",
            f"  document length in tokens: min {self.min_doc_tokens:,}, "
            f"avg {self.avg_doc_tokens:,.0f}, max {self.max_doc_tokens:,}",
            f"  chunks: {self.train_chunks:,} train, {self.val_chunks:,} validation",
        ]

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)


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
