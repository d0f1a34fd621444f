"""The trainer's sampling order: a function of (seed, epoch), resumable mid-epoch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import Dataset, DistributedSampler

__all__ = ["ResumableSampler", "seeded_generator"]


class ResumableSampler(DistributedSampler[int]):
    """``DistributedSampler`` (order a function of seed and epoch) that can start mid-epoch.

    ``start`` skips that many of this rank's indices of the epoch: the data position a
    resumed run continues from.
    """

    def __init__(
        self,
        dataset: Dataset[Any],
        *,
        num_replicas: int = 1,
        rank: int = 0,
        shuffle: bool = True,
        seed: int = 0,
        epoch: int = 0,
        start: int = 0,
    ) -> None:
        super().__init__(
            dataset,
            num_replicas=num_replicas,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
            drop_last=True,
        )
        self.set_epoch(epoch)
        self.start = start

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[self.start :])

    def __len__(self) -> int:
        return max(0, self.num_samples - self.start)


def seeded_generator(seed: int, epoch: int) -> torch.Generator:
    """The DataLoader's own generator, so creating an iterator never draws from torch's."""
    return torch.Generator().manual_seed(seed * 1_000_003 + epoch)
