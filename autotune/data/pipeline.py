"""A model's own input pipeline (its spec's ``data_fn``) as the trainer's data."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autotune.core.errors import DataError
from autotune.data.train_data import VAL_FRACTION, TrainData

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec

__all__ = ["prepare_pipeline_data"]


def prepare_pipeline_data(
    spec: ModelSpec,
    *,
    seq_len: int,
    val_fraction: float = VAL_FRACTION,
) -> TrainData:
    """A spec's own pipeline (``data_fn``): its Dataset, the tail held out for validation.

    The tail, not a random draw, so the split is the same on every run and every rank
    without a seed; a data set whose order matters (time series) keeps its future out of
    training.
    """
    from torch.utils.data import Subset

    from autotune.contract.spec import user_code

    with user_code(spec, "data_fn"):
        dataset, collate_fn = spec.dataset(seq_len)
    n = len(dataset)
    if n < 2:
        raise DataError(
            f"model {spec.name!r}: its data_fn gave {n} sample(s); training needs at least "
            "2 (one to train on, one to validate)"
        )
    n_val = min(n - 1, max(1, round(n * val_fraction)))
    train, val = Subset(dataset, range(n - n_val)), Subset(dataset, range(n - n_val, n))
    line = (
        f"data: {spec.name}'s own pipeline (data_fn): {n:,} samples, {n - n_val:,} to train "
        f"on, the last {n_val:,} for validation"
    )
    return TrainData(
        train=train,
        val=val,
        tokenizer=None,
        summary=[line],
        extra={"source": "data_fn", "samples": n, "validation": n_val},
        collate_fn=collate_fn,
    )
