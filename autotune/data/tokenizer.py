"""Tokenizers built locally, with no download: byte-level for text, a word vocabulary for
pointer-gen.

``ByteTokenizer`` maps UTF-8 bytes to ids 0..255 and puts its special tokens after them
(``<eos>`` = 256 separates documents), so any text encodes and the vocabulary is 257 ids.
``WordVocab`` is the pointer-generator's vocabulary: PAD=0, UNK=1, BOS=2, EOS=3, then the
most frequent words of the training split. Both save to and load from a small JSON file
that lives next to the checkpoints, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autotune.core.errors import DataError
from autotune.core.files import atomic_write_text, read_capped

__all__ = [
    "ByteTokenizer",
    "WordVocab",
    "load_tokenizer",
    "split_words",
]

_WORD_RE = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True, kw_only=True)
class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, then ``specials`` (``<eos>`` first)."""

    specials: tuple[str, ...] = ("<eos>",)
    kind: str = field(default="byte", init=False)

    @property
    def vocab_size(self) -> int:
        return 256 + len(self.specials)

    @property
    def eos_id(self) -> int:
        return 256 + self.specials.index("<eos>")

    def encode(self, text: str) -> np.ndarray:
        """Token ids of ``text`` (a 1-D uint16 array; no special tokens added)."""
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``; special tokens become newlines, broken UTF-8 becomes U+FFFD."""
        out = bytearray()
        for i in ids:
            i = int(i)
            if 0 <= i < 256:
                out.append(i)
            elif i == self.eos_id:
                out += b"\n"
        return out.decode("utf-8", errors="replace")

    def check_fits(self, vocab_size: int, *, model: str) -> None:
        if self.vocab_size > vocab_size:
            raise DataError(
                f"the byte-level tokenizer has {self.vocab_size} ids (256 bytes + "
                f"{len(self.specials)} special), but model {model!r} has vocab_size="
                f"{vocab_size}; use a model with vocab_size >= {self.vocab_size} (the "
                "preset's model.args.vocab_size)"
            )

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "specials": list(self.specials), "vocab_size": self.vocab_size}

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")


def split_words(text: str) -> list[str]:
    """Lower-cased words and punctuation marks: ``"Hi, you."`` -> ``hi , you .``."""
    return _WORD_RE.findall(text.lower())


@dataclass(frozen=True, kw_only=True)
class WordVocab:
    """Word -> id for the pointer-generator: PAD=0, UNK=1, BOS=2, EOS=3, then words."""

    words: tuple[str, ...]  # ids 4.. in order
    kind: str = field(default="word", init=False)

    SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")

    @classmethod
    def build(cls, texts: Iterable[Sequence[str]], *, vocab_size: int) -> WordVocab:
        """The ``vocab_size - 4`` most frequent words (ties broken alphabetically)."""
        if vocab_size <= len(cls.SPECIALS):
            raise DataError(f"a word vocabulary needs vocab_size > 4, got {vocab_size}")
        counts: Counter[str] = Counter()
        for words in texts:
            counts.update(words)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return cls(words=tuple(w for w, _ in ranked[: vocab_size - len(cls.SPECIALS)]))

    @property
    def vocab_size(self) -> int:
        return len(self.SPECIALS) + len(self.words)

    def to_mapping(self) -> dict[str, int]:
        """The ``vocab`` dict that ``encode_example`` takes (specials included)."""
        mapping = {w: i for i, w in enumerate(self.SPECIALS)}
        mapping.update({w: i + len(self.SPECIALS) for i, w in enumerate(self.words)})
        return mapping

    def decode(self, ids: Iterable[int], oov: Sequence[str] = ()) -> str:
        """Words of ``ids``; ids past the vocabulary index ``oov`` (copied source words)."""
        table = self.SPECIALS + self.words
        out = []
        for i in ids:
            i = int(i)
            if i == 3:  # EOS
                break
            if i in (0, 2):
                continue
            if i < len(table):
                out.append(table[i])
            elif i - len(table) < len(oov):
                out.append(oov[i - len(table)])
            else:
                out.append("<unk>")
        return " ".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "specials": list(self.SPECIALS),
            "words": list(self.words),
            "vocab_size": self.vocab_size,
        }

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode()).hexdigest()

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.to_dict()) + "\n")


def load_tokenizer(path: Path) -> ByteTokenizer | WordVocab:
    """Read a tokenizer saved by ``save`` (``tokenizer.json`` in a run's folder)."""
    raw = read_capped(path, limit=2**28, what="tokenizer file", error=DataError)
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise DataError(f"cannot read tokenizer file {str(path)!r}: {exc}") from None
    if not isinstance(data, Mapping):
        raise DataError(f"tokenizer file {str(path)!r}: expected a JSON object")
    kind = data.get("kind")
    if kind == "byte":
        specials = data.get("specials", ["<eos>"])
        return ByteTokenizer(specials=tuple(str(s) for s in specials))
    if kind == "word":
        return WordVocab(words=tuple(str(w) for w in data.get("words", [])))
    raise DataError(f"tokenizer file {str(path)!r}: unknown kind {kind!r} (expected byte, word)")
