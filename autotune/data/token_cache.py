"""The token cache: a corpus's byte-level token streams, tokenized once and memory-mapped
on every later run.

Token streams are cached under ``cache_dir/tokens/<key>/`` as ``uint16`` ``train.bin`` and
``val.bin`` files (``<eos>`` after each document) plus ``meta.json``; the key hashes the
sources (path, size, modification time; the default corpus by content), the tokenizer and
the validation fraction, so a rerun memory-maps the cache and skips reading and
tokenizing. When no document falls in the validation split, the last 10% of the training
token stream is held out instead. Writers racing on one entry keep the first complete copy.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from autotune.core.errors import DataError
from autotune.core.files import atomic_write_text, dir_mode
from autotune.core.makers import maker_alive, maker_tag
from autotune.data.corpus import (
    Document,
    default_corpus,
    load_documents,
    split_validation,
    text_files,
)
from autotune.data.tokenizer import ByteTokenizer
from autotune.data.train_data import VAL_FRACTION, Log, quiet

__all__ = [
    "CACHE_VERSION",
    "cached_tokens",
    "default_cache_dir",
    "read_cache",
    "remove_abandoned_builds",
    "sources_fingerprint",
    "write_cache",
]

CACHE_VERSION = 1


def default_cache_dir() -> Path:
    """``$AUTOTUNE_CACHE_DIR``, else ``$XDG_CACHE_HOME/autotune``, else ``~/.cache/autotune``."""
    env = os.environ.get("AUTOTUNE_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "autotune"


def sources_fingerprint(data: Path | None) -> list[Any]:
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
    for file in text_files(data):
        try:
            st = file.stat()
        except OSError as exc:
            raise DataError(f"cannot read data file {str(file)!r}: {exc.strerror}") from None
        out.append([str(file.resolve()), st.st_size, st.st_mtime_ns])
    return out


def remove_abandoned_builds(folder: Path) -> None:
    """Remove the half-built entries in ``folder`` (``.NAME.PID-START-XXXX.tmp``) whose
    builder is gone: one killed before it could remove its own (SIGKILL, the out-of-memory
    killer, a SIGTERM or a rank's Ctrl-C before any handler) left it for good, as large
    as the corpus's tokens. Another process's build in progress stays."""
    for path in folder.glob(".*.tmp"):
        tag = path.name.removesuffix(".tmp").rsplit(".", 1)[-1]
        if tag.count("-") >= 2 and path.is_dir() and not maker_alive(tag):
            shutil.rmtree(path, ignore_errors=True)


def write_cache(
    final: Path,
    *,
    docs_train: Sequence[Document],
    docs_val: Sequence[Document],
    tokenizer: ByteTokenizer,
    meta: dict[str, Any],
    val_fraction: float,
) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned_builds(final.parent)
    prefix = f".{final.name}.{maker_tag()}-"  # this builder: see remove_abandoned_builds
    tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=prefix, suffix=".tmp"))
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
        # one process at a time decides what stands at `final`: two builders of a damaged
        # entry each moved it aside, and one moved the other's fresh entry away
        with FileLock(final.parent / f".{final.name}.lock"):
            if read_cache(final, meta["key"]) is not None:
                shutil.rmtree(tmp, ignore_errors=True)  # another process finished it first
            elif os.path.lexists(final):
                _replace_damaged(final, tmp)
            else:
                os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _replace_damaged(final: Path, fresh: Path) -> None:
    """Put the ``fresh`` entry where a damaged one is (a garbage meta.json, a cut-off
    train.bin, a folder for val.bin): the entry is derived data, rebuilt just now, and
    keeping the damaged one (its meta.json was there) refused every later run. The
    entry's lock is the caller's."""
    aside = final.with_name(f".{final.name}.damaged-{os.getpid()}")
    os.replace(final, aside)
    os.replace(fresh, final)
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside, ignore_errors=True)
    else:
        aside.unlink(missing_ok=True)


def read_cache(path: Path, key: str) -> dict[str, Any] | None:
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


def cached_tokens(
    data: Path | None,
    *,
    tokenizer: ByteTokenizer,
    source: str,
    cache_dir: str | Path | None = None,
    val_fraction: float = VAL_FRACTION,
    log: Log = quiet,
) -> tuple[Path, dict[str, Any], bool]:
    """The cache entry of ``data``'s (or the default corpus's) train and validation token
    streams: its folder, its ``meta.json``, and whether it was there already (else the
    documents are read, split, tokenized and written now)."""
    sources = sources_fingerprint(data)
    key_data = {
        "version": CACHE_VERSION,
        "sources": sources,
        "tokenizer": tokenizer.to_dict(),
        "val_fraction": val_fraction,
    }
    key = hashlib.sha256(json.dumps(key_data, sort_keys=True).encode()).hexdigest()[:24]
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()) / "tokens" / key
    meta = read_cache(cache, key)
    if meta is not None:
        return cache, meta, True
    docs = default_corpus() if data is None else load_documents(data, log=log)
    train_docs, val_docs = split_validation(docs, val_fraction)
    try:
        write_cache(
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
    meta = read_cache(cache, key)
    if meta is None:
        raise DataError(f"the token cache at {str(cache)!r} could not be written or read")
    return cache, meta, False
