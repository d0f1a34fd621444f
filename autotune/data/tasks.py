"""Which data a model trains on: its own pipeline (``data_fn``), or the ``--data`` format
of its task (language model, seq2seq, regression), and the help that says what that is."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.core.errors import DataError
from autotune.data.lm import prepare_lm_data
from autotune.data.pipeline import prepare_pipeline_data
from autotune.data.regression import prepare_regression_data
from autotune.data.seq2seq import encoder_of, prepare_seq2seq_data
from autotune.data.train_data import Log, TrainData, quiet

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec

__all__ = ["format_help", "load_data"]


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


def load_data(
    spec: ModelSpec,
    data: str | Path | None,
    *,
    seq_len: int,
    cache_dir: str | Path | None = None,
    text_column: str = "text",
    target_column: str = "target",
    log: Log = quiet,
) -> TrainData:
    """The training and validation data for ``spec``'s task (the formats: lm.py and
    corpus.py for language models, seq2seq.py, regression.py).

    A spec with its own pipeline (``data_fn``) trains on it, as its bursts measured it."""
    path = None if data is None else Path(data).expanduser()
    if spec.data_fn is not None:
        if path is not None:
            raise DataError(
                f"model {spec.name!r} reads its own data (its spec's data_fn), so --data is "
                "not used; drop --data, or give the spec no data_fn to train on files"
            )
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
            encode_example=encoder_of(spec),
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
