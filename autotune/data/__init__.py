"""Training data: corpora, the token cache, per-task datasets, pipelines, the loader rule.

Each concept owns a module: ``train_data`` (``TrainData``, what the trainer takes from any
source), ``corpus`` (documents and the validation split), ``token_cache``, ``lm``,
``seq2seq`` and ``regression`` (a task's datasets), ``pipeline`` (a spec's own
``data_fn``), ``tasks`` (``load_data``: which of those a model trains on), ``loader``
(``loader_kwargs``: the DataLoader arguments a config decides), ``sampling`` (the
resumable order) and ``tokenizer``. The names other packages use are re-exported here.
"""

from autotune.data.corpus import (
    DEFAULT_CORPUS,
    MAX_FILE_BYTES,
    Document,
    default_corpus,
    load_documents,
    split_validation,
)
from autotune.data.lm import LMDataset, prepare_lm_data, unigram_entropy
from autotune.data.loader import loader_kwargs
from autotune.data.pipeline import prepare_pipeline_data
from autotune.data.regression import prepare_regression_data
from autotune.data.sampling import ResumableSampler, seeded_generator
from autotune.data.seq2seq import prepare_seq2seq_data
from autotune.data.tasks import format_help, load_data
from autotune.data.token_cache import CACHE_VERSION, default_cache_dir
from autotune.data.train_data import VAL_FRACTION, DataStats, TrainData

__all__ = [
    "CACHE_VERSION",
    "DEFAULT_CORPUS",
    "MAX_FILE_BYTES",
    "VAL_FRACTION",
    "DataStats",
    "Document",
    "LMDataset",
    "ResumableSampler",
    "TrainData",
    "default_cache_dir",
    "default_corpus",
    "format_help",
    "load_data",
    "load_documents",
    "loader_kwargs",
    "prepare_lm_data",
    "prepare_pipeline_data",
    "prepare_regression_data",
    "prepare_seq2seq_data",
    "seeded_generator",
    "split_validation",
    "unigram_entropy",
]
