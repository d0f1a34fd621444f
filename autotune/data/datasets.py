"""Training data: corpora, tokenization, a memory-mapped token cache, datasets per task.

Formats (``--data``):

- **Language models** (mu, gpt, any ``task="lm"`` spec): a UTF-8 text file (one document),
  a folder searched recursively for ``*.txt`` and ``*.md`` (one document per file), or a
  ``.jsonl`` file with one JSON object per line holding a ``"text"`` string (one document
  per line). With no ``--data``, the default corpus is the Python reference documentation
  that CPython ships in ``pydoc_data.topics`` (split at its section headings), so training
  works offline on any Python install. Text is byte-level tokenized (``<eos>`` between
  documents); documents are packed into one token stream and cut into ``seq_len + 1``
  windows with a stride of ``seq_len``, so long documents are split, never truncated, and
  every token is a target once.
- **pointer-gen** (``task="seq2seq"``): a ``.jsonl`` file of ``{"source": ..., "summary":
  ...}`` objects. A word vocabulary (the ``vocab_size - 4`` most frequent lower-cased words
  and punctuation marks of the training split) is built and saved.
- **text-regressor** (``task="regression"``): a CSV file with a header, a text column
  (``text`` unless ``--text-column``), a numeric target column (``target`` unless
  ``--target-column``) and any number of numeric feature columns (every other column
  whose values are all numbers; standardized with the training split's mean and std).
  Missing values are an error, not silently filled.
  Each data file must be a regular file (no device, FIFO or socket) of at most 4 GiB.

The validation split is a deterministic function of each document's content (about 10%
of documents; when none falls in it, the last 10% of the training token stream). Token
streams are cached under ``cache_dir/<key>/`` as ``uint16`` ``.bin`` files plus
``meta.json``; the key hashes the sources (path, size, modification time; the default
corpus by content) and the tokenizer, so a rerun memory-maps the cache and skips reading
and tokenizing.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import Dataset

from autotune.core.errors import DataError
from autotune.core.files import atomic_write_text, dir_mode, read_capped, regular_file_size
from autotune.core.signals import ignore_stop_signals
from autotune.data.sampling import ResumableSampler, seeded_generator
from autotune.data.tokenizer import ByteTokenizer, WordVocab, split_words

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec

__all__ = [
    "CACHE_VERSION",
    "DEFAULT_CORPUS",
    "DataStats",
    "Document",
    "LMDataset",
    "MAX_FILE_BYTES",
    "ResumableSampler",
    "TrainData",
    "default_cache_dir",
    "default_corpus",
    "format_help",
    "load_data",
    "load_documents",
    "loader_kwargs",
    "seeded_generator",
    "prepare_lm_data",
    "prepare_regression_data",
    "prepare_seq2seq_data",
    "split_validation",
    "unigram_entropy",
]

CACHE_VERSION = 1
DEFAULT_CORPUS = "pydoc_data.topics (the Python reference documentation shipped with CPython)"
VAL_FRACTION = 0.1
MAX_FILE_BYTES = 4 * 2**30  # per data file (read into memory); more goes in several files
TEXT_SUFFIXES = (".txt", ".md")
_MISSING = {"", "na", "n/a", "nan", "null", "none"}
_HEADING = re.compile(r"^(?=.+\n([*=\-~^\"])\1{2,}[ \t]*$)", re.MULTILINE)

Log = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class Document:
    source: str  # file path (with ":line" for JSONL) or "pydoc:<topic>"
    text: str


# -- reading ----------------------------------------------------------------------------


def default_corpus() -> list[Document]:
    """The Python docs shipped with CPython, one document per section."""
    try:
        from pydoc_data.topics import topics
    except ImportError:  # pragma: no cover - stripped-down Python builds
        raise DataError(
            "this Python has no pydoc_data module, so there is no built-in corpus; "
            "pass your own text with --data PATH"
        ) from None
    docs = []
    for topic in sorted(topics):
        text = topics[topic]
        starts = [m.start() for m in _HEADING.finditer(text)]
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        starts.append(len(text))
        for i, (a, b) in enumerate(itertools.pairwise(starts)):
            section = text[a:b].strip()
            if section:
                docs.append(Document(source=f"pydoc:{topic}#{i}", text=section))
    return docs


def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, or a DataError saying why it cannot be training text."""
    try:
        raw = read_capped(path, limit=MAX_FILE_BYTES)
    except PermissionError:
        raise DataError(f"cannot read data file {str(path)!r}: permission denied") from None
    except OSError as exc:
        raise DataError(f"cannot read data file {str(path)!r}: {exc.strerror or exc}") from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise DataError(
            f"data file {str(path)!r} looks binary (a NUL byte at offset {nul}); "
            "expected UTF-8 text"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"data file {str(path)!r} is not UTF-8 text (invalid byte 0x{raw[exc.start]:02x} "
            f"at offset {exc.start}); convert it to UTF-8 or remove it"
        ) from None


def _iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(
                f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno}); "
                "expected one JSON object per line"
            ) from None
        if not isinstance(obj, dict):
            raise DataError(
                f"{path}:{lineno}: expected a JSON object per line, got {type(obj).__name__}"
            )
        yield lineno, obj


def _text_files(path: Path) -> list[Path]:
    """The files a ``--data`` path stands for (sorted), or a DataError."""
    if not path.exists():
        raise DataError(f"data path {str(path)!r} does not exist")
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
        )
        if not files:
            raise DataError(
                f"data folder {str(path)!r} has no {'/'.join(TEXT_SUFFIXES)} files "
                "(searched recursively)"
            )
        return files
    regular_file_size(path)
    return [path]


def load_documents(path: Path, *, log: Log = _quiet) -> list[Document]:
    """Documents of a text file, a folder of text files, or a JSONL file of ``"text"``."""
    docs: list[Document] = []
    empty = 0
    for file in _text_files(path):
        if file.suffix.lower() == ".jsonl":
            for lineno, obj in _iter_jsonl(file):
                text = obj.get("text")
                if not isinstance(text, str):
                    raise DataError(
                        f"{file}:{lineno}: expected a string field 'text', got "
                        f"{'nothing' if text is None else type(text).__name__} "
                        f"(keys: {', '.join(obj) or 'none'})"
                    )
                if text.strip():
                    docs.append(Document(source=f"{file}:{lineno}", text=text))
        else:
            text = _read_text(file)
            if text.strip():
                docs.append(Document(source=str(file), text=text))
            else:
                empty += 1
    if empty:
        log(f"note: skipped {empty} empty file(s) under {path}")
    if not docs:
        raise DataError(f"data path {str(path)!r} holds no text (it is empty)")
    return docs


def split_validation(
    docs: Sequence[Document], fraction: float = VAL_FRACTION
) -> tuple[list[Document], list[Document]]:
    """(train, val) by a hash of each document: the same split on every run and machine."""
    train: list[Document] = []
    val: list[Document] = []
    for doc in docs:
        h = hashlib.sha256(f"{doc.source}\0{doc.text}".encode()).digest()
        (val if int.from_bytes(h[:4], "big") < fraction * 2**32 else train).append(doc)
    if not train:  # everything hashed into val (one file, say): train on it all; each
        # preparer then holds out its own tail (LM tokens, or the last document)
        train, val = val, []
    return train, val


# -- the token cache ----------------------------------------------------------------------


def default_cache_dir() -> Path:
    """``$AUTOTUNE_CACHE_DIR``, else ``$XDG_CACHE_HOME/autotune``, else ``~/.cache/autotune``."""
    env = os.environ.get("AUTOTUNE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "autotune"


def _sources_fingerprint(data: Path | None) -> list[Any]:
    if data is None:
        try:
            from pydoc_data.topics import topics
        except ImportError:  # pragma: no cover
            return ["pydoc-missing"]
        digest = hashlib.sha256()
        for key in sorted(topics):
            digest.update(key.encode() + b"\0" + topics[key].encode() + b"\0")
        return ["pydoc", sys.version_info[:2], digest.hexdigest()]
    out: list[Any] = []
    for file in _text_files(data):
        try:
            st = file.stat()
        except OSError as exc:
            raise DataError(f"cannot read data file {str(file)!r}: {exc.strerror}") from None
        out.append([str(file.resolve()), st.st_size, st.st_mtime_ns])
    return out


@dataclass(frozen=True, kw_only=True)
class DataStats:
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
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _write_cache(
    final: Path,
    *,
    docs_train: Sequence[Document],
    docs_val: Sequence[Document],
    tokenizer: ByteTokenizer,
    meta: dict[str, Any],
    val_fraction: float,
) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
    try:
        os.chmod(tmp, dir_mode())
        lengths: list[int] = []
        counts = {}
        for split, docs in (("train", docs_train), ("val", docs_val)):
            n = 0
            with open(tmp / f"{split}.bin", "wb") as f:
                for doc in docs:
                    ids = tokenizer.encode(doc.text)
                    lengths.append(len(ids))
                    f.write(ids.astype(np.uint16).tobytes())
                    f.write(np.array([tokenizer.eos_id], dtype=np.uint16).tobytes())
                    n += len(ids) + 1
                f.flush()
                os.fsync(f.fileno())
            counts[split] = n
        if counts["val"] == 0:
            # No document hashed into the validation split (e.g. one file): hold out the
            # tail of the training stream instead.
            train = np.fromfile(tmp / "train.bin", dtype=np.uint16)
            cut = int(len(train) * (1 - val_fraction))
            train[:cut].tofile(tmp / "train.bin")
            train[cut:].tofile(tmp / "val.bin")
            counts = {"train": cut, "val": len(train) - cut}
        meta = {
            **meta,
            "train_tokens": counts["train"],
            "val_tokens": counts["val"],
            "documents": len(docs_train) + len(docs_val),
            "train_documents": len(docs_train),
            "val_documents": len(docs_val),
            "min_doc_tokens": min(lengths),
            "avg_doc_tokens": sum(lengths) / len(lengths),
            "max_doc_tokens": max(lengths),
        }
        atomic_write_text(tmp / "meta.json", json.dumps(meta, indent=2) + "\n")
        try:
            os.replace(tmp, final)
        except OSError:  # another process finished the same cache first: keep theirs
            if not (final / "meta.json").is_file():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_cache(path: Path, key: str) -> dict[str, Any] | None:
    try:
        meta: dict[str, Any] = json.loads((path / "meta.json").read_text(encoding="utf-8"))
        ok = (
            meta.get("key") == key
            and (path / "train.bin").stat().st_size == 2 * meta["train_tokens"]
            and (path / "val.bin").stat().st_size == 2 * meta["val_tokens"]
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta if ok else None


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


# -- per task -------------------------------------------------------------------------------


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


def prepare_lm_data(
    data: Path | None,
    *,
    seq_len: int,
    vocab_size: int,
    model: str = "model",
    cache_dir: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    log: Log = _quiet,
) -> TrainData:
    """Byte-level token streams of ``data`` (or the default corpus), cached, as windows."""
    tokenizer = ByteTokenizer()
    tokenizer.check_fits(vocab_size, model=model)
    sources = _sources_fingerprint(data)
    key_data = {
        "version": CACHE_VERSION,
        "sources": sources,
        "tokenizer": tokenizer.to_dict(),
        "val_fraction": val_fraction,
    }
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:24]
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "tokens" / key
    source = DEFAULT_CORPUS if data is None else str(data)
    meta = _read_cache(cache, key)
    cached = meta is not None
    if meta is None:
        docs = default_corpus() if data is None else load_documents(data, log=log)
        train_docs, val_docs = split_validation(docs, val_fraction)
        try:
            _write_cache(
                cache,
                docs_train=train_docs,
                docs_val=val_docs,
                tokenizer=tokenizer,
                meta={"key": key, "source": source, "inputs": key_data},
                val_fraction=val_fraction,
            )
        except OSError as exc:  # a read-only or full cache folder
            raise DataError(
                f"cannot write the token cache in {str(cache.parent)!r}: "
                f"{exc.strerror or exc}; point AUTOTUNE_CACHE_DIR at a folder you can write"
            ) from None
        meta = _read_cache(cache, key)
        if meta is None:
            raise DataError(f"the token cache at {str(cache)!r} could not be written or read")
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
    log: Log = _quiet,
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
    for lineno, obj in _iter_jsonl(data):
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


class _TensorDataset(Dataset[dict[str, torch.Tensor]]):
    def __init__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        self.tensors = dict(tensors)
        self.n = len(next(iter(self.tensors.values())))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {k: v[index] for k, v in self.tensors.items()}


def _as_number(value: str) -> float | None:
    try:
        x = float(value)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def prepare_regression_data(
    data: Path,
    *,
    seq_len: int,
    vocab_size: int,
    model: str = "model",
    text_column: str = "text",
    target_column: str = "target",
    log_target: bool = False,
    val_fraction: float = VAL_FRACTION,
    log: Log = _quiet,
) -> TrainData:
    """A CSV of text, numeric features and a numeric target; features standardized.
    ``log_target``: the model predicts ``log1p(target)`` (text-regressor's default, for
    prices), so the batches carry that."""
    tokenizer = ByteTokenizer()
    tokenizer.check_fits(vocab_size, model=model)
    header, body = _read_csv(data, text_column=text_column, target_column=target_column)
    numeric, ignored = _numeric_columns(
        data, header, body, text_column=text_column, target_column=target_column
    )
    col = {name: j for j, name in enumerate(header)}
    docs = [Document(source=str(i), text=json.dumps(row)) for i, row in enumerate(body)]
    train_docs, val_docs = split_validation(docs, val_fraction)
    if not val_docs:
        train_docs, val_docs = train_docs[:-1], train_docs[-1:]
    if not train_docs:
        raise DataError(f"CSV {str(data)!r} needs at least 2 rows (train and validation)")

    def columns(split: Sequence[Document]) -> tuple[list[str], np.ndarray, np.ndarray]:
        parsed = [json.loads(d.text) for d in split]
        texts = [r[col[text_column]] for r in parsed]
        feats = np.array(
            [[float(r[col[n]]) for n in numeric] for r in parsed], dtype=np.float64
        ).reshape(len(parsed), len(numeric))
        target = np.array([float(r[col[target_column]]) for r in parsed], dtype=np.float64)
        return texts, feats, target

    train_cols, val_cols = columns(train_docs), columns(val_docs)
    if log_target:
        low = min(float(train_cols[2].min()), float(val_cols[2].min()))
        if low <= -1:
            raise DataError(
                f"CSV {str(data)!r}: the model predicts log1p({target_column}) (log_target), "
                f"which needs targets > -1, but the smallest is {low}; use a model with "
                "log_target=false for such targets"
            )
    mean = train_cols[1].mean(axis=0) if numeric else np.zeros(0)
    std = train_cols[1].std(axis=0) if numeric else np.ones(0)
    std = np.where(std > 0, std, 1.0)

    def tensors(texts: list[str], feats: np.ndarray, target: np.ndarray) -> dict[str, Any]:
        return _regression_tensors(
            texts,
            (feats - mean) / std,
            np.log1p(target) if log_target else target,
            tokenizer=tokenizer,
            seq_len=seq_len,
        )

    lengths = [len(t.encode("utf-8")) for t in train_cols[0] + val_cols[0]]
    summary = [
        f"data: {data} (CSV)",
        f"  rows: {len(body)} ({len(train_docs)} train, {len(val_docs)} validation)",
        f"  text column {text_column!r}: min {min(lengths)}, avg "
        f"{sum(lengths) / len(lengths):.0f}, max {max(lengths)} bytes (truncated to {seq_len})",
        f"  numeric columns ({len(numeric)}): {', '.join(numeric) or 'none'}; "
        f"target {target_column!r}",
    ]
    if ignored:
        summary.append(f"  ignored non-numeric columns: {', '.join(ignored)}")
    return TrainData(
        train=_TensorDataset(tensors(*train_cols)),
        val=_TensorDataset(tensors(*val_cols)),
        tokenizer=tokenizer,
        summary=summary,
        spec_args={"n_numeric": len(numeric)},
        extra={
            "task": "regression",
            "source": str(data),
            "text_column": text_column,
            "target_column": target_column,
            "numeric_columns": numeric,
            "numeric_mean": mean.tolist(),
            "numeric_std": std.tolist(),
            "target_transform": "log1p" if log_target else None,
        },
    )


def _read_csv(
    data: Path, *, text_column: str, target_column: str
) -> tuple[list[str], list[list[str]]]:
    """The CSV's header and its non-blank rows, each as long as the header; the text and
    target columns must be there."""
    if data.is_dir():
        raise DataError(f"data path {str(data)!r} is a folder; text-regressor reads one CSV file")
    rows = list(csv.reader(_read_text(data).splitlines()))
    rows = [r for r in rows if any(cell.strip() for cell in r)]
    if not rows:
        raise DataError(f"data file {str(data)!r} is empty; expected a CSV with a header row")
    header, body = [h.strip() for h in rows[0]], rows[1:]
    for name, flag in ((text_column, "--text-column"), (target_column, "--target-column")):
        if name not in header:
            raise DataError(
                f"CSV {str(data)!r} has no column {name!r} (its columns: {', '.join(header)}); "
                f"name the right one with {flag}"
            )
    if not body:
        raise DataError(f"CSV {str(data)!r} has a header but no rows")
    for i, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise DataError(
                f"{data}:{i}: expected {len(header)} fields like the header, got {len(row)}"
            )
    return header, body


def _numeric_columns(
    data: Path,
    header: Sequence[str],
    body: Sequence[Sequence[str]],
    *,
    text_column: str,
    target_column: str,
) -> tuple[list[str], list[str]]:
    """The feature columns (every all-numeric one but the text and the target) and the
    ignored ones (not all numbers). The target must be numeric; no value may be missing."""
    numeric: list[str] = []
    ignored: list[str] = []
    for j, name in enumerate(header):
        if name == text_column:
            continue
        values = [row[j].strip() for row in body]
        present = [v for v in values if v.lower() not in _MISSING]
        is_numeric = bool(present) and all(_as_number(v) is not None for v in present)
        if name == target_column and not is_numeric:
            bad = next((v for v in present if _as_number(v) is None), "")
            raise DataError(
                f"CSV {str(data)!r}: target column {name!r} must hold numbers, found {bad!r}"
            )
        if not is_numeric:
            ignored.append(name)
            continue
        for i, v in enumerate(values, start=2):
            if v.lower() in _MISSING:
                raise DataError(
                    f"{data}:{i}: column {name!r} has a missing value ({v!r}); fill or drop "
                    "missing values before training (none are imputed)"
                )
        if name != target_column:
            numeric.append(name)
    return numeric, ignored


def _regression_tensors(
    texts: list[str],
    numeric: np.ndarray,
    target: np.ndarray,
    *,
    tokenizer: ByteTokenizer,
    seq_len: int,
) -> dict[str, Any]:
    """A split's batch tensors: each text's bytes (cut to ``seq_len - 1``, then EOS),
    padded with a mask, and the (already standardized) features and (transformed) target."""
    ids = torch.zeros(len(texts), seq_len, dtype=torch.long)
    mask = torch.zeros(len(texts), seq_len, dtype=torch.bool)
    for i, text in enumerate(texts):
        enc = tokenizer.encode(text)[: seq_len - 1].astype(np.int64)
        row = torch.from_numpy(np.append(enc, tokenizer.eos_id))
        ids[i, : len(row)] = row
        mask[i, : len(row)] = True
    return {
        "input_ids": ids,  # (N, L)
        "attention_mask": mask,  # (N, L)
        "numeric": torch.from_numpy(numeric).float(),  # (N, F)
        "target": torch.from_numpy(target).float(),
    }


def format_help(task: str) -> str:
    """What ``--data`` must look like for a model of ``task``."""
    if task == "seq2seq":
        return (
            "pointer-gen trains on a JSONL file with one object per line, "
            '{"source": "<article text>", "summary": "<its summary>"}; there is no built-in '
            "offline corpus of summaries, so pass one with --data PATH.jsonl"
        )
    if task == "regression":
        return (
            "text-regressor trains on a CSV file with a header: a text column ('text', or "
            "--text-column NAME), a numeric target column ('target', or --target-column "
            "NAME), and numeric feature columns (every other all-numeric column); there is "
            "no built-in offline data set for it, so pass one with --data PATH.csv"
        )
    return (
        "language models train on UTF-8 text: a file, a folder of *.txt/*.md files, or a "
        'JSONL file with a "text" field per line; without --data, the Python documentation '
        "shipped with CPython"
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


def _encoder_of(spec: ModelSpec) -> Callable[..., dict[str, torch.Tensor]] | None:
    """A seq2seq model's own ``encode_example`` (None: pointer-gen's); a user model's is
    wrapped in ``_UserEncoder`` (a built-in's failure is autotune's bug: its traceback)."""
    from autotune.models.registry import is_user_code

    encode = spec.extras.get("encode_example")
    if encode is None or not is_user_code(spec.source):
        return encode
    return _UserEncoder(spec, encode)


def load_data(
    spec: ModelSpec,
    data: str | Path | None,
    *,
    seq_len: int,
    cache_dir: str | Path | None = None,
    text_column: str = "text",
    target_column: str = "target",
    log: Log = _quiet,
) -> TrainData:
    """The training and validation data for ``spec``'s task (see the module docstring).

    A spec with its own pipeline (``data_fn``) trains on it, as its bursts measured it."""
    path = None if data is None else Path(data).expanduser()
    if spec.data_fn is not None:
        if path is not None:
            raise DataError(
                f"model {spec.name!r} reads its own data (its spec's data_fn), so --data is "
                "not used; drop --data, or give the spec no data_fn to train on files"
            )
        from autotune.data.pipeline import prepare_pipeline_data

        return prepare_pipeline_data(spec, seq_len=seq_len)
    if spec.task == "custom":
        raise DataError(
            f"model {spec.name!r} has no data autotune can read: its spec has neither a "
            "built-in task (lm, seq2seq, regression) nor a data_fn. Give the spec a "
            "data_fn(args, seq_len) that returns your Dataset, or train it in your own loop "
            "with autotune.train.loop or an exported preset (autotune presets export)"
        )
    vocab_size = spec.args.get("vocab_size")
    if not isinstance(vocab_size, int):
        raise DataError(
            f"model {spec.name!r} has no integer args['vocab_size'], so autotune cannot build "
            "a tokenizer for it"
        )
    if spec.task == "lm":
        return prepare_lm_data(
            path,
            seq_len=seq_len,
            vocab_size=vocab_size,
            model=spec.name,
            cache_dir=cache_dir,
            log=log,
        )
    if path is None:
        raise DataError(f"model {spec.name!r} needs --data: {format_help(spec.task)}")
    if spec.task == "seq2seq":
        max_tgt = int(spec.args.get("tgt_len", 192))
        return prepare_seq2seq_data(
            path,
            vocab_size=vocab_size,
            max_src=seq_len,
            max_tgt=max_tgt,
            encode_example=_encoder_of(spec),
            log=log,
        )
    if spec.task == "regression":
        return prepare_regression_data(
            path,
            seq_len=seq_len,
            vocab_size=vocab_size,
            model=spec.name,
            text_column=text_column,
            target_column=target_column,
            log_target=bool(spec.args.get("log_target", False)),
            log=log,
        )
    raise DataError(f"model {spec.name!r} has task {spec.task!r}, which autotune cannot train")


# -- loading --------------------------------------------------------------------------------


def loader_kwargs(config: TrainConfig) -> dict[str, Any]:
    """The training DataLoader's arguments that ``config`` decides: micro-batch, workers,
    pinned memory, prefetch, persistent workers.

    The burst (what is measured) and the trainer (what is run) both build their loader
    with these. ``pin_memory`` is the config's as given: ``check_config`` refuses it on a
    device that is not CUDA, and the search never offers it there. Workers leave a stop
    signal to the main process (``signals.ignore_stop_signals``).
    """
    kwargs: dict[str, Any] = {
        "batch_size": config.micro_batch,
        "drop_last": True,
        "num_workers": config.num_workers,
        "pin_memory": config.pin_memory,
    }
    if config.num_workers > 0:
        kwargs["worker_init_fn"] = ignore_stop_signals
        kwargs["persistent_workers"] = config.persistent_workers
        if config.prefetch_factor is not None:
            kwargs["prefetch_factor"] = config.prefetch_factor
    return kwargs
