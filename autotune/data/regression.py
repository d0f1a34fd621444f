"""Regression data (text-regressor, ``task="regression"``): a CSV of text, numeric
features and a numeric target.

A CSV file with a header, a text column (``text`` unless ``--text-column``), a numeric
target column (``target`` unless ``--target-column``) and any number of numeric feature
columns (every other column whose values are all numbers; standardized with the training
split's mean and std). Missing values are an error, not silently filled.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from autotune.core.errors import DataError
from autotune.data.corpus import Document, read_text, split_validation
from autotune.data.tokenizer import ByteTokenizer
from autotune.data.train_data import VAL_FRACTION, Log, TrainData, quiet

__all__ = ["prepare_regression_data"]

_MISSING = {"", "na", "n/a", "nan", "null", "none"}


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
    log: Log = quiet,
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
    docs = [Document(source=str(i), text=json.dumps(row)) for i, row in enumerate(body)]
    train_docs, val_docs = split_validation(docs, val_fraction)
    if not val_docs:
        train_docs, val_docs = train_docs[:-1], train_docs[-1:]
    if not train_docs:
        raise DataError(f"CSV {str(data)!r} needs at least 2 rows (train and validation)")
    pick = _Columns(header, text=text_column, target=target_column, numeric=numeric)
    train_cols, val_cols = pick(train_docs), pick(val_docs)
    if log_target:
        _check_log_target(data, target_column, train_cols, val_cols)
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


_Split = tuple[list[str], np.ndarray, np.ndarray]  # texts, features (N, F), target (N,)


class _Columns:
    """A split's text, numeric feature and target columns, from its rows (JSON lists)."""

    def __init__(
        self, header: Sequence[str], *, text: str, target: str, numeric: Sequence[str]
    ) -> None:
        col = {name: j for j, name in enumerate(header)}
        self.text = col[text]
        self.target = col[target]
        self.numeric = [col[n] for n in numeric]

    def __call__(self, split: Sequence[Document]) -> _Split:
        parsed = [json.loads(d.text) for d in split]
        texts = [r[self.text] for r in parsed]
        feats = np.array(
            [[float(r[j]) for j in self.numeric] for r in parsed], dtype=np.float64
        ).reshape(len(parsed), len(self.numeric))
        target = np.array([float(r[self.target]) for r in parsed], dtype=np.float64)
        return texts, feats, target


def _check_log_target(data: Path, target_column: str, train: _Split, val: _Split) -> None:
    """A model that predicts ``log1p(target)`` needs every target > -1."""
    low = min(float(train[2].min()), float(val[2].min()))
    if low <= -1:
        raise DataError(
            f"CSV {str(data)!r}: the model predicts log1p({target_column}) (log_target), "
            f"which needs targets > -1, but the smallest is {low}; use a model with "
            "log_target=false for such targets"
        )


def _read_csv(
    data: Path, *, text_column: str, target_column: str
) -> tuple[list[str], list[list[str]]]:
    """The CSV's header and its non-blank rows, each as long as the header; the text and
    target columns must be there."""
    if data.is_dir():
        raise DataError(f"data path {str(data)!r} is a folder; text-regressor reads one CSV file")
    rows = list(csv.reader(read_text(data).splitlines()))
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
