"""How the training DataLoader's arguments follow from a config: the one rule the burst
(what is measured), the trainer (what is run), ``PresetLoop`` and the exports share."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.core.signals import ignore_stop_signals

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig

__all__ = ["loader_kwargs"]


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
