"""The burst's batches: the real DataLoader path over the spec's own pipeline, or over a
pool of its synthetic samples, with the trainer's loader arguments (what is measured is
what is run).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec

__all__ = ["POOL_MICRO_BATCHES", "forever", "make_loader"]

# How many micro-batches' worth of distinct synthetic samples the data set cycles over.
POOL_MICRO_BATCHES = 4


def make_loader(
    spec: ModelSpec, config: TrainConfig, *, samples: int, seed: int
) -> torch.utils.data.DataLoader[Batch]:
    """The real DataLoader path: over the spec's own pipeline (``data_fn``) where it has
    one, else over a pool of its synthetic samples.

    Synthetic sample ``i`` is row ``i mod pool`` of a few micro-batches made by
    ``spec.make_batch``; that data set is ``samples`` long so one epoch covers the whole
    burst (no worker restarts inside the timed steps). A real data set is shuffled with
    the trial's seed and read epoch after epoch.
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    from autotune.contract.spec import user_code
    from autotune.data.loader import loader_kwargs

    with user_code(spec, "data_fn"):
        real, collate_fn = spec.dataset(config.seq_len)
    if real is not None:
        extra: dict[str, Any] = {} if collate_fn is None else {"collate_fn": collate_fn}
        return DataLoader(
            real,
            shuffle=True,
            generator=torch.Generator().manual_seed(seed),
            **loader_kwargs(config),  # the trainer's loader arguments: what is measured is run
            **extra,
        )

    pool_size = config.micro_batch * POOL_MICRO_BATCHES
    generator = torch.Generator().manual_seed(seed)
    pool = spec.make_batch(batch_size=pool_size, seq_len=config.seq_len, generator=generator)

    class PoolDataset(Dataset["Batch"]):
        def __len__(self) -> int:
            return samples

        def __getitem__(self, index: int) -> Batch:
            row = index % pool_size
            return {k: v[row] for k, v in pool.items()}

    return DataLoader(
        PoolDataset(),
        shuffle=False,
        generator=torch.Generator().manual_seed(seed),
        **loader_kwargs(config),  # the trainer's loader arguments: what is measured is run
    )


def forever(loader: torch.utils.data.DataLoader[Batch]) -> Generator[Batch, None, None]:
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield batch
        if empty:  # a real data set shorter than one micro-batch (drop_last)
            from autotune.core.errors import DataError

            raise DataError(
                f"the model's data set has fewer samples than one micro-batch of "
                f"{loader.batch_size}"
            )
