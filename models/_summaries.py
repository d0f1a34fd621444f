"""The pointer-generator summarizer's text side: the vocabulary with its special tokens,
one example encoded with its source-only words (OOVs) in extended ids, and ROUGE.

Kept apart from the model (``pointer_gen.py``) so each reads on its own; the model module
re-exports these names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence

import torch

from ._common import IGNORE_INDEX

__all__ = [
    "BOS",
    "EOS",
    "PAD",
    "SPECIAL_TOKENS",
    "UNK",
    "encode_example",
    "ids_to_words",
    "make_vocab",
    "oov_words",
    "rouge",
]

PAD, UNK, BOS, EOS = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<unk>", "<s>", "</s>")


# -- vocabulary and examples ------------------------------------------------------------------


def make_vocab(words: Iterable[str], size: int) -> dict[str, int]:
    """The ``size - 4`` most frequent words (ties: first seen) after the 4 special tokens."""
    if size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocabulary size must exceed {len(SPECIAL_TOKENS)}, got {size}")
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for word, _ in Counter(w for w in words if w not in vocab).most_common(size - len(vocab)):
        vocab[word] = len(vocab)
    return vocab


def _vocab_size(vocab: Mapping[str, int], vocab_size: int | None) -> int:
    size = vocab_size if vocab_size is not None else max([*vocab.values(), EOS]) + 1
    too_big = [w for w, i in vocab.items() if not 0 <= i < size]
    if too_big:
        raise ValueError(f"vocabulary ids must be in [0, {size}); bad: {too_big[:5]}")
    return size


def oov_words(src_words: Sequence[str], vocab: Mapping[str, int], *, max_src: int) -> list[str]:
    """The source's out-of-vocabulary words, in order of first appearance: OOV number i."""
    oovs: dict[str, None] = {}
    for w in src_words[:max_src]:
        if w not in vocab:
            oovs.setdefault(w, None)
    return list(oovs)


def encode_example(
    src_words: Sequence[str],
    tgt_words: Sequence[str],
    vocab: Mapping[str, int],
    /,
    *,
    max_src: int,
    max_tgt: int,
    vocab_size: int | None = None,
) -> dict[str, torch.Tensor]:
    """One sample (unbatched, padded to ``max_src`` / ``max_tgt``) from word lists.

    ``vocab`` maps words to ids in ``[0, vocab_size)`` with ids 0-3 kept for PAD, UNK, BOS
    and EOS (``make_vocab`` builds one); ``vocab_size`` must be the model's (default: the
    largest id + 1). The source is cut to ``max_src`` words and the target to
    ``max_tgt - 1`` words so that EOS always fits. Target words that are OOV but occur in
    the source get their extended id (the model can copy them); other OOVs become UNK.
    """
    size = _vocab_size(vocab, vocab_size)
    if max_src < 1 or max_tgt < 1:
        raise ValueError(f"max_src and max_tgt must be positive, got {max_src=}, {max_tgt=}")
    src = list(src_words[:max_src])
    if not src:
        raise ValueError("the source is empty: a summary needs at least one source word")
    oovs = {w: i for i, w in enumerate(oov_words(src, vocab, max_src=max_src))}
    src_ids = [vocab.get(w, UNK) for w in src]
    src_ext = [vocab[w] if w in vocab else size + oovs[w] for w in src]
    tgt = list(tgt_words[: max_tgt - 1])
    tgt_ext = [vocab[w] if w in vocab else size + oovs[w] if w in oovs else UNK for w in tgt]
    tgt_in = [BOS] + [vocab.get(w, UNK) for w in tgt]
    tgt_out = [*tgt_ext, EOS]

    def padded(ids: list[int], length: int, fill: int) -> torch.Tensor:
        return torch.tensor(ids + [fill] * (length - len(ids)), dtype=torch.long)

    return {
        "src": padded(src_ids, max_src, PAD),
        "src_ext": padded(src_ext, max_src, PAD),
        "src_mask": padded([1] * len(src), max_src, 0).bool(),
        "tgt_in": padded(tgt_in, max_tgt, PAD),
        "tgt_out": padded(tgt_out, max_tgt, IGNORE_INDEX),
        "n_oov": torch.tensor(len(oovs), dtype=torch.long),
    }


def ids_to_words(ids: Iterable[int], id_to_word: Sequence[str], oovs: Sequence[str]) -> list[str]:
    """Extended ids back to words: ``id_to_word`` for the vocabulary, ``oovs`` after it."""
    size = len(id_to_word)
    return [id_to_word[i] if i < size else oovs[i - size] for i in ids]


# -- ROUGE --------------------------------------------------------------------------------------


def _f1(overlap: int, n_ref: int, n_hyp: int) -> float:
    if overlap == 0 or n_ref == 0 or n_hyp == 0:
        return 0.0
    precision, recall = overlap / n_hyp, overlap / n_ref
    return 2 * precision * recall / (precision + recall)


def _rouge_n(ref: Sequence[Hashable], hyp: Sequence[Hashable], n: int) -> float:
    ref_grams = Counter(tuple(ref[i : i + n]) for i in range(len(ref) - n + 1))
    hyp_grams = Counter(tuple(hyp[i : i + n]) for i in range(len(hyp) - n + 1))
    overlap = sum((ref_grams & hyp_grams).values())
    return _f1(overlap, sum(ref_grams.values()), sum(hyp_grams.values()))


def _lcs(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0]
        for j, y in enumerate(b):
            cur.append(prev[j] + 1 if x == y else max(prev[j + 1], cur[j]))
        prev = cur
    return prev[-1]


def rouge(reference: Sequence[Hashable], hypothesis: Sequence[Hashable]) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 of one hypothesis, over tokens (words or ids)."""
    return {
        "rouge1": _rouge_n(reference, hypothesis, 1),
        "rouge2": _rouge_n(reference, hypothesis, 2),
        "rougeL": _f1(_lcs(reference, hypothesis), len(reference), len(hypothesis)),
    }
