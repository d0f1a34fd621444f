"""The trainer's stream of training micro-batches, epoch after epoch, resumable.

The order is a function of ``(seed, epoch)`` only and the position is ``(epoch, offset)``
(this rank's samples of the epoch already consumed), so a checkpoint that holds the
position continues the same stream.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from torch.utils.data import DataLoader

from autotune.config.train_config import TrainConfig
from autotune.core.errors import DataError
from autotune.data.loader import loader_kwargs
from autotune.data.sampling import ResumableSampler, seeded_generator
from autotune.data.train_data import TrainData
from autotune.engine.distributed import DistInfo

if TYPE_CHECKING:
    from autotune.contract.spec import Batch

__all__ = ["BatchStream"]


class BatchStream:
    """Training micro-batches epoch after epoch, with a resumable position (epoch, offset)."""

    def __init__(
        self,
        data: TrainData,
        *,
        config: TrainConfig,
        seed: int,
        dist: DistInfo,
        epoch: int = 0,
        offset: int = 0,
    ) -> None:
        self.data = data
        self.config = config
        self.seed = seed
        self.dist = dist
        self.epoch = epoch
        self.offset = offset  # samples of this rank's epoch already consumed
        self.loader: DataLoader[Any] | None = None
        self._iter: Iterator[Batch] | None = None

    @property
    def samples(self) -> int:
        """The training split's samples (every rank's)."""
        return len(self.data.train)  # type: ignore[arg-type]

    @property
    def samples_per_epoch(self) -> int:
        """This rank's samples per epoch."""
        return ResumableSampler(
            self.data.train, num_replicas=self.dist.world_size, rank=self.dist.rank
        ).num_samples

    def build(self, config: TrainConfig) -> None:
        """(Re)build the DataLoader for ``config``'s micro-batch, from the current position."""
        self.close()
        self.config = config
        per_epoch = self.samples_per_epoch
        if per_epoch < config.micro_batch:
            n = len(self.data.train)  # type: ignore[arg-type]
            raise DataError(
                f"the training split has {n} samples ({per_epoch} per "
                f"process), fewer than one micro-batch of {config.micro_batch}; give more data "
                "or a smaller config.micro_batch"
            )
        sampler = ResumableSampler(
            self.data.train,
            num_replicas=self.dist.world_size,
            rank=self.dist.rank,
            shuffle=True,
            seed=self.seed,
            epoch=self.epoch,
            start=self.offset,
        )
        self.loader = DataLoader(
            self.data.train,
            sampler=sampler,
            collate_fn=self.data.collate_fn,
            generator=seeded_generator(self.seed, self.epoch),
            **loader_kwargs(config),  # the burst's loader arguments: what was measured is run
        )
        self._iter = None

    def next(self) -> Batch:
        if self.loader is None:
            self.build(self.config)
        loader = self.loader
        if loader is None or not isinstance(loader.sampler, ResumableSampler):  # pragma: no cover
            raise RuntimeError("the training DataLoader was not built")
        for _ in range(2):
            if self._iter is None:
                loader.sampler.set_epoch(self.epoch)
                loader.sampler.start = self.offset
                loader.generator = seeded_generator(self.seed, self.epoch)
                self._iter = iter(loader)
            try:
                batch: Batch = next(self._iter)
            except StopIteration:
                self.epoch += 1
                self.offset = 0
                self._iter = None
                continue
            self.offset += self.config.micro_batch
            return batch
        raise DataError("the training data yielded no batch for a whole epoch")  # unreachable

    def seek(self, epoch: int, offset: int) -> None:
        self.epoch, self.offset = epoch, offset
        self._iter = None

    def close(self) -> None:
        self._iter = None
        self.loader = None
