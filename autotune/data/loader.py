"""How the training DataLoader's arguments follow from a config: the one rule the burst
(what is measured), the trainer (what is run), ``PresetLoop`` and the exports share; and
what every worker does first (``worker_init``): leave stop signals to the main process,
and die with it."""

from __future__ import annotations

import functools
import os
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.core.signals import PR_SET_PDEATHSIG, ignore_stop_signals, prctl

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig

__all__ = ["die_with_parent", "loader_kwargs", "worker_init"]


def die_with_parent() -> None:
    """Have the kernel SIGKILL this process when its parent dies (Linux ``prctl``
    ``PR_SET_PDEATHSIG``; a no-op elsewhere), then end it at once if the parent died
    before that was set. A worker whose main process was killed outright (``kill -9``)
    would otherwise live on until PyTorch's watchdog notices, seconds later. The parent
    is the one ``multiprocessing`` started this process from; the kernel follows the
    thread that forked it, so the loader's iterator must be made by a thread that lives
    as long as it (the main thread: the burst's, the trainer's)."""
    import multiprocessing

    parent = multiprocessing.parent_process()
    if parent is None:  # not a multiprocessing child: nothing to follow
        return
    if not prctl(PR_SET_PDEATHSIG, signal.SIGKILL):  # no prctl: PyTorch's watchdog remains
        return
    if os.getppid() != parent.pid:  # it died before prctl: no signal will come
        os.kill(os.getpid(), signal.SIGKILL)


def worker_init(worker_id: int, user: Callable[[int], None] | None = None) -> None:
    """A DataLoader worker's first act: die with its parent (``die_with_parent``), leave
    stop signals to it (``signals.ignore_stop_signals``), then the caller's own
    ``worker_init_fn`` (``user``), if any."""
    die_with_parent()
    ignore_stop_signals(worker_id)
    if user is not None:
        user(worker_id)


def loader_kwargs(
    config: TrainConfig, *, worker_init_fn: Callable[[int], None] | None = None
) -> dict[str, Any]:
    """The training DataLoader's arguments that ``config`` decides: micro-batch, workers,
    pinned memory, prefetch, persistent workers.

    The burst (what is measured) and the trainer (what is run) both build their loader
    with these. ``pin_memory`` is the config's as given: ``check_config`` refuses it on a
    device that is not CUDA, and the search never offers it there. Workers start with
    ``worker_init``, then ``worker_init_fn`` (a caller's own, run after it).
    """
    from autotune.config.knobs import registry

    kwargs: dict[str, Any] = {"drop_last": True}
    for knob in registry(type(config)):  # each knob that is a DataLoader argument
        value = getattr(config, knob.name)
        off = knob.needs is not None and not getattr(config, knob.needs)  # prefetch: workers
        if knob.loader_arg is not None and value is not None and not off:
            kwargs[knob.loader_arg] = value
    if config.num_workers > 0:
        kwargs["worker_init_fn"] = (
            worker_init
            if worker_init_fn is None
            else functools.partial(worker_init, user=worker_init_fn)
        )
    elif worker_init_fn is not None:
        kwargs["worker_init_fn"] = worker_init_fn  # no workers: the DataLoader ignores it
    return kwargs
