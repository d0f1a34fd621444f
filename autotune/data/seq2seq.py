"""Summarization data (pointer-gen, ``task="seq2seq"``): source/summary pairs of a JSONL
file and a word vocabulary.

A ``.jsonl`` file of ``{"source": ..., "summary": ...}`` objects. A word vocabulary (the
``vocab_size - 4`` most frequent lower-cased words and punctuation marks of the training
split) is built and saved. A model's own ``encode_example`` makes each sample
(pointer-gen's by default).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import Dataset

from autotune.core.errors import DataError
from autotune.data.corpus import Document, iter_jsonl, split_validation
from autotune.data.tokenizer import WordVocab, split_words
from autotune.data.train_data import VAL_FRACTION, Log, TrainData, quiet

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec

__all__ = ["encoder_of", "prepare_seq2seq_data"]


class _Seq2SeqDataset(Dataset[dict[str, torch.Tensor]]):
    def __init__(
        self,
        pairs: Sequence[tuple[list[str], list[str]]],
        vocab: Mapping[str, int],
        *,
        max_src: int,
        max_tgt: int,
        vocab_size: int,
        encode: Callable[..., dict[str, torch.Tensor]],
    ) -> None:
        self.pairs = list(pairs)
        self.vocab = dict(vocab)
        self.vocab_size = vocab_size
        self.max_src = max_src
        self.max_tgt = max_tgt
        self.encode = encode

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        src, tgt = self.pairs[index]
        return self.encode(
            src,
            tgt,
            self.vocab,
            max_src=self.max_src,
            max_tgt=self.max_tgt,
            vocab_size=self.vocab_size,
        )


def prepare_seq2seq_data(
    data: Path,
    *,
    vocab_size: int,
    max_src: int,
    max_tgt: int,
    encode_example: Callable[..., dict[str, torch.Tensor]] | None = None,
    val_fraction: float = VAL_FRACTION,
    log: Log = quiet,
) -> TrainData:
    """Source/summary pairs of a JSONL file, a word vocabulary from the training split;
    ``encode_example`` makes one sample (default: pointer-gen's, models/pointer_gen.py)."""
    if encode_example is None:
        from autotune.models import get_model

        encode_example = get_model("pointer-gen").extras["encode_example"]

    if data.is_dir():
        raise DataError(
            f"data path {str(data)!r} is a folder; pointer-gen reads one JSONL file of "
            '{"source": ..., "summary": ...} objects'
        )
    docs: list[Document] = []
    for lineno, obj in iter_jsonl(data):
        src, tgt = obj.get("source"), obj.get("summary")
        if not isinstance(src, str) or not isinstance(tgt, str):
            raise DataError(
                f"{data}:{lineno}: expected string fields 'source' and 'summary' "
                f"(keys: {', '.join(obj) or 'none'})"
            )
        if src.strip() and tgt.strip():
            docs.append(Document(source=f"{lineno}", text=json.dumps([src, tgt])))
    if not docs:
        raise DataError(f"data file {str(data)!r} holds no source/summary pairs (it is empty)")
    train_docs, val_docs = split_validation(docs, val_fraction)
    if not val_docs:
        train_docs, val_docs = train_docs[:-1], train_docs[-1:]
    if not train_docs:
        raise DataError(f"data file {str(data)!r} needs at least 2 pairs (train and validation)")

    def words(doc: Document) -> tuple[list[str], list[str]]:
        src, tgt = json.loads(doc.text)
        return split_words(src), split_words(tgt)

    train_pairs = [words(d) for d in train_docs]
    val_pairs = [words(d) for d in val_docs]
    vocab = WordVocab.build((w for pair in train_pairs for w in pair), vocab_size=vocab_size)
    mapping = vocab.to_mapping()
    src_lens = [len(s) for s, _ in train_pairs + val_pairs]
    summary = [
        f"data: {data} (source/summary pairs)",
        f"  pairs: {len(docs)} ({len(train_pairs)} train, {len(val_pairs)} validation)",
        f"  source length in words: min {min(src_lens)}, avg {sum(src_lens) / len(src_lens):.0f}, "
        f"max {max(src_lens)} (truncated to {max_src}); summaries to {max_tgt}",
        f"  vocabulary: {vocab.vocab_size} words (of model vocab_size {vocab_size})",
    ]
    train = _Seq2SeqDataset(
        train_pairs,
        mapping,
        max_src=max_src,
        max_tgt=max_tgt,
        vocab_size=vocab_size,
        encode=encode_example,
    )
    train[0]  # in this process, before training: a broken encode_example fails here clearly
    return TrainData(
        train=train,
        val=_Seq2SeqDataset(
            val_pairs,
            mapping,
            max_src=max_src,
            max_tgt=max_tgt,
            vocab_size=vocab_size,
            encode=encode_example,
        ),
        tokenizer=vocab,
        summary=summary,
        extra={"task": "seq2seq", "source": str(data), "max_src": max_src, "max_tgt": max_tgt},
    )


class _UserEncoder:
    """A user model's ``encode_example``, run under ``user_code``: what it raises is a
    ModelLoadError naming the model and the function (exit 2), not a traceback."""

    def __init__(self, spec: ModelSpec, encode: Callable[..., dict[str, torch.Tensor]]) -> None:
        self.spec = spec
        self.encode = encode

    def __call__(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        from autotune.contract.spec import user_code

        with user_code(self.spec, "encode_example"):
            return self.encode(*args, **kwargs)


def encoder_of(spec: ModelSpec) -> Callable[..., dict[str, torch.Tensor]] | None:
    """A seq2seq model's own ``encode_example`` (None: pointer-gen's); a user model's is
    wrapped in ``_UserEncoder`` (a built-in's failure is autotune's bug: its traceback)."""
    from autotune.models.registry import is_user_code

    encode = spec.extras.get("encode_example")
    if encode is None or not is_user_code(spec.source):
        return encode
    return _UserEncoder(spec, encode)
