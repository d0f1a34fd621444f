"""Corpora: documents read from the user's text files or the default corpus, and the
deterministic validation split.

A ``--data`` path is a UTF-8 text file (one document), a folder searched recursively for
``*.txt`` and ``*.md`` (one document per file), or a ``.jsonl`` file with one JSON object
per line holding a ``"text"`` string (one document per line). With no ``--data``, the
default corpus is the Python reference documentation that CPython ships in
``pydoc_data.topics`` (split at its section headings), so training works offline on any
Python install. Each data file must be a regular file (no device, FIFO or socket) of at
most 4 GiB.

The validation split is a deterministic function of each document's content (about 10%
of documents).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autotune.core.errors import DataError
from autotune.core.files import read_capped, regular_file_size
from autotune.data.train_data import VAL_FRACTION, Log, quiet

__all__ = [
    "DEFAULT_CORPUS",
    "MAX_FILE_BYTES",
    "Document",
    "default_corpus",
    "iter_jsonl",
    "load_documents",
    "read_text",
    "split_validation",
    "text_files",
]

DEFAULT_CORPUS = "pydoc_data.topics (the Python reference documentation shipped with CPython)"
MAX_FILE_BYTES = 4 * 2**30  # per data file (read into memory); more goes in several files
TEXT_SUFFIXES = (".txt", ".md")
_HEADING = re.compile(r"^(?=.+\n([*=\-~^\"])\1{2,}[ \t]*$)", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Document:
    source: str  # file path (with ":line" for JSONL) or "pydoc:<topic>"
    text: str


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


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path``, or a DataError saying why it cannot be training text."""
    raw = read_capped(
        path,
        limit=MAX_FILE_BYTES,
        what="data path",
        error=DataError,
        advice="split it into smaller files",
    )
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


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(read_text(path).splitlines(), start=1):
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


def text_files(path: Path) -> list[Path]:
    """The files a ``--data`` path stands for (sorted), or a DataError."""
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
    regular_file_size(path, what="data path", error=DataError)
    return [path]


def load_documents(path: Path, *, log: Log = quiet) -> list[Document]:
    """Documents of a text file, a folder of text files, or a JSONL file of ``"text"``."""
    docs: list[Document] = []
    empty = 0
    for file in text_files(path):
        if file.suffix.lower() == ".jsonl":
            for lineno, obj in iter_jsonl(file):
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
            text = read_text(file)
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
