"""A preset's config in your own training loop: exactly what the burst measured.

``PresetLoop`` hands out the pieces autotune's trainer uses, each from the one function
that owns its rule: the DataLoader arguments (``autotune.data.loader.loader_kwargs``), the model
on its device with the backend flags and ``torch.compile`` (``autotune.engine.build``), AdamW
(fused where the config says), the autocast context, and the step itself (``Stepper``:
autocast, the fp16 GradScaler, accumulation with ``no_sync`` under DDP, clipping)::

    loop = PresetLoop.from_preset("best.yaml", device="cuda")
    loader = loop.dataloader(dataset)                  # micro-batch, workers, pinning...
    model = loop.prepare(MyModel(**loop.config.knobs))
    stepper = loop.stepper(model, loop.optimizer(model, lr=3e-4), loss_fn=my_loss)
    for micro_batches in loop.steps(loader, max_steps=1000):
        out = stepper.step(micro_batches)              # one optimizer step

Loading a preset here reads data only: its model reference is never imported.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.config.checks import machine_problems
from autotune.config.train_config import TrainConfig
from autotune.core.errors import ConfigError, UsageError
from autotune.machine import omp

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    from autotune.contract.spec import Batch
    from autotune.core.device_caps import DeviceCaps
    from autotune.engine.step import Stepper
    from autotune.preset.sections import Preset

__all__ = ["PresetLoop"]


def _check_machine(config: TrainConfig, device: torch.device, caps: DeviceCaps | None) -> None:
    """Refuse a config this machine cannot run (``machine_problems``: DataLoader workers
    per usable core, the parallel record's processes), as ``autotune train`` does; the
    device is probed only where the parallel record needs it."""
    if caps is None and config.parallel is not None:
        from autotune.machine.hardware import probe

        caps = probe().device(str(device))
    problems = machine_problems(config, caps)
    if problems:
        raise ConfigError(problems, context="config not runnable on this machine")


def _check_cuda(device: torch.device) -> None:
    """A CUDA device this process cannot use refused here, as ``--device`` is: on a
    machine without one, ``prepare`` failed later with torch's "Torch not compiled with
    CUDA enabled" assertion and a traceback."""
    if device.type != "cuda":
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise UsageError(f"device {str(device)!r}: torch sees no CUDA device on this machine")
    if device.index is not None and device.index >= count:
        raise UsageError(
            f"device {str(device)!r}: torch sees {count} CUDA device(s) here (cuda:0 to "
            f"cuda:{count - 1})"
        )


class PresetLoop:
    """A config (one process's share of it under DDP) applied to a loop you write.

    ``world_size`` > 1 keeps the preset's global batch: each process accumulates
    ``grad_accum / world_size`` micro-batches (``autotune.engine.distributed.per_rank_config``).
    A config this machine cannot run (more DataLoader workers than it allows per usable
    core, more processes than cores or GPUs) is a ``ConfigError`` here, before anything
    starts; ``device_caps`` is the device's probe, where the caller has one.
    """

    def __init__(
        self,
        config: TrainConfig,
        *,
        device: str | torch.device = "cpu",
        world_size: int = 1,
        grad_clip: float | None = 1.0,
        device_caps: DeviceCaps | None = None,
    ) -> None:
        import torch

        from autotune.config.train_config import TrainConfig
        from autotune.engine.distributed import per_rank_config
        from autotune.engine.step import apply_allocator_settings

        if not isinstance(config, TrainConfig):  # "best.yaml": an AttributeError inside
            raise UsageError(
                f"PresetLoop: config must be a TrainConfig (a preset's .config), got "
                f"{type(config).__name__}; for a preset file or name, use "
                "PresetLoop.from_preset(...)"
            )
        try:
            where = torch.device(device)
        except (RuntimeError, TypeError):  # "tpu": torch's RuntimeError, listing its backends
            raise UsageError(
                f"device {device!r} is not a device torch knows; give cpu, cuda or cuda:N"
            ) from None
        _check_cuda(where)
        _check_machine(config, where, device_caps)
        self.global_config = config
        self.config = per_rank_config(config, world_size)
        self.device = where
        self.grad_clip = grad_clip
        apply_allocator_settings(self.config)  # expandable segments, before CUDA starts
        if (problem := omp.mismatch(self.config)) is not None:
            warnings.warn(problem, RuntimeWarning, stacklevel=2)

    @classmethod
    def from_preset(
        cls,
        preset: Preset | str | Path,
        *,
        device: str | torch.device = "cpu",
        world_size: int = 1,
    ) -> PresetLoop:
        """From a ``Preset`` or a preset file or name (``autotune.preset.resolve_preset``);
        the preset's ``training.grad_clip`` becomes the step's clipping."""
        from autotune.preset import load_preset, resolve_preset
        from autotune.preset.sections import Preset

        if not isinstance(preset, Preset):
            preset = load_preset(resolve_preset(str(preset)))
        return cls(
            preset.config,
            device=device,
            world_size=world_size,
            grad_clip=preset.training.grad_clip,
        )

    @property
    def micro_batch(self) -> int:
        return self.config.micro_batch

    @property
    def grad_accum(self) -> int:
        """Micro-batches per optimizer step on this process."""
        return self.config.grad_accum

    def loader_kwargs(
        self, *, worker_init_fn: Callable[[int], None] | None = None
    ) -> dict[str, Any]:
        """The DataLoader arguments the config decides (batch size, workers, pinning,
        prefetch, persistent workers, ``drop_last``); a ``worker_init_fn`` of yours runs
        after autotune's own (workers leave stop signals to the main process and die
        with it)."""
        from autotune.data.loader import loader_kwargs

        return loader_kwargs(self.config, worker_init_fn=worker_init_fn)

    def dataloader(self, dataset: Dataset[Any], **kwargs: Any) -> DataLoader[Any]:
        """A DataLoader over ``dataset`` with the measured arguments; ``kwargs`` add to
        them (``shuffle``, ``sampler``, ``collate_fn``, a ``worker_init_fn`` run after
        autotune's own, ...) and must not contradict them."""
        from torch.utils.data import DataLoader

        measured = self.loader_kwargs(worker_init_fn=kwargs.pop("worker_init_fn", None))
        clash = sorted(k for k in kwargs if k in measured and kwargs[k] != measured[k])
        if clash:
            raise ValueError(
                f"DataLoader arguments {clash} differ from the preset's "
                f"({', '.join(f'{k}={measured[k]!r}' for k in clash)}): what was measured "
                "would not be what runs; change the preset instead"
            )
        return DataLoader(dataset, **{**measured, **kwargs})

    def prepare(self, model: nn.Module) -> nn.Module:
        """``model`` on the device, with the process-wide numerics flags (TF32, cuDNN
        benchmark) set, channels-last and ``torch.compile`` applied as the config says
        (``stepper`` lays inputs out channels-last to match). Activation checkpointing and
        model knobs (``self.config.knobs``) are the model's own: build it with them."""
        from autotune.engine.build import build_step_model

        # the engine's build, in its order; wrapping for several processes is yours
        _, prepared = build_step_model(model, self.config, self.device)
        return prepared

    def optimizer(
        self, model: nn.Module, *, lr: float = 3e-4, weight_decay: float = 0.1
    ) -> torch.optim.AdamW:
        """autotune's AdamW: decay on matrices only, fused where the config says."""
        from autotune.engine.step import make_optimizer

        return make_optimizer(model, self.config, lr=lr, weight_decay=weight_decay)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast context of the config's precision (bf16/fp16; none for fp32/tf32),
        for an eval step or a forward you run yourself."""
        from autotune.engine.step import autocast_context

        return autocast_context(self.config, self.device)

    def stepper(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> Stepper:
        """The step function the burst measured: ``stepper.step(micro_batches)`` runs
        ``loss_fn(model, batch)`` under autocast for each micro-batch, scales (fp16),
        accumulates, clips and steps the optimizer."""
        from autotune.engine.step import Stepper

        return Stepper(
            model,
            optimizer,
            config=self.config,
            device=self.device,
            loss_fn=loss_fn,
            grad_clip=self.grad_clip,
            scheduler=scheduler,
        )

    def steps(
        self, batches: Iterable[Batch], *, max_steps: int | None = None
    ) -> Iterator[list[Batch]]:
        """Groups of ``grad_accum`` micro-batches, on the device, one group per optimizer
        step; epochs of ``batches`` follow each other until ``max_steps`` (None: one pass,
        an incomplete last group dropped)."""
        from autotune.engine.step import to_device

        done = 0
        while max_steps is None or done < max_steps:
            group: list[Batch] = []
            seen = False
            for batch in batches:
                seen = True
                group.append(to_device(batch, self.device, non_blocking=self.config.pin_memory))
                if len(group) == self.grad_accum:
                    yield group
                    group = []
                    done += 1
                    if max_steps is not None and done >= max_steps:
                        return
            if max_steps is None or not seen:
                return
