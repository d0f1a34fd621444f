"""Language-model data: byte-level token windows of a corpus, read from the token cache.

Text is byte-level tokenized (``<eos>`` between documents); documents are packed into one
token stream and cut into ``seq_len + 1`` windows with a stride of ``seq_len``, so long
documents are split, never truncated, and every token is a target once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from autotune.core.errors import DataError
from autotune.data.corpus import DEFAULT_CORPUS
from autotune.data.token_cache import cached_tokens
from autotune.data.tokenizer import ByteTokenizer
from autotune.data.train_data import VAL_FRACTION, DataStats, Log, TrainData, quiet

__all__ = ["LMDataset", "prepare_lm_data", "unigram_entropy"]


class LMDataset(Dataset[dict[str, torch.Tensor]]):
    """``seq_len + 1`` windows of a token file (stride ``seq_len``), memory-mapped lazily."""

    def __init__(self, path: Path, *, n_tokens: int, seq_len: int) -> None:
        self.path = Path(path)
        self.n_tokens = n_tokens
        self.seq_len = seq_len
        self._tokens: np.ndarray | None = None  # opened per process (DataLoader workers)

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            if self.n_tokens == 0:
                self._tokens = np.zeros(0, dtype=np.uint16)
            else:
                self._tokens = np.memmap(
                    self.path, dtype=np.uint16, mode="r", shape=(self.n_tokens,)
                )
        return self._tokens

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}

    def __len__(self) -> int:
        return max(0, (self.n_tokens - 1) // self.seq_len)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * self.seq_len
        window = torch.from_numpy(
            self.tokens[start : start + self.seq_len + 1].astype(np.int64)
        )  # (T+1,)
        return {"input_ids": window[:-1], "labels": window[1:]}


def prepare_lm_data(
    data: Path | None,
    *,
    seq_len: int,
    vocab_size: int,
    model: str = "model",
    cache_dir: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    log: Log = quiet,
) -> TrainData:
    """Byte-level token streams of ``data`` (or the default corpus), cached, as windows."""
    tokenizer = ByteTokenizer()
    tokenizer.check_fits(vocab_size, model=model)
    source = DEFAULT_CORPUS if data is None else str(data)
    cache, meta, cached = cached_tokens(
        data,
        tokenizer=tokenizer,
        source=source,
        cache_dir=cache_dir,
        val_fraction=val_fraction,
        log=log,
    )
    train = LMDataset(cache / "train.bin", n_tokens=meta["train_tokens"], seq_len=seq_len)
    val = LMDataset(cache / "val.bin", n_tokens=meta["val_tokens"], seq_len=seq_len)
    for name, ds in (("training", train), ("validation", val)):
        if len(ds) == 0:
            raise DataError(
                f"the {name} split of {source} has {ds.n_tokens} tokens, fewer than "
                f"seq_len + 1 = {seq_len + 1}; give more text or a shorter seq_len"
            )
    stats = DataStats(
        documents=meta["documents"],
        train_documents=meta["train_documents"],
        val_documents=meta["val_documents"],
        train_tokens=meta["train_tokens"],
        val_tokens=meta["val_tokens"],
        min_doc_tokens=meta["min_doc_tokens"],
        avg_doc_tokens=meta["avg_doc_tokens"],
        max_doc_tokens=meta["max_doc_tokens"],
        train_chunks=len(train),
        val_chunks=len(val),
        source=source,
        cached=cached,
    )
    return TrainData(
        train=train,
        val=val,
        tokenizer=tokenizer,
        stats=stats,
        summary=stats.lines(),
        extra={"task": "lm", "cache": str(cache), "seq_len": seq_len},
    )


def unigram_entropy(tokens: np.ndarray) -> float:
    """Entropy in nats of the token distribution: the loss of the best context-free model."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64))
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
