"""One burst inside the trial's own process: set-up, the warm-up and timed steps, the
optional verification, and the memory check against the budget (``Trial``).

It owns how a step is timed (``timed_step``: queued device work drained before both clock
reads) and how an exception becomes a status (``classify_exception``); the process's
entry point is ``autotune.burst.child``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from autotune.burst.ranks import across_ranks, join_ranks, rank_state
from autotune.burst.result import (
    FIRST_WARMUP_MICRO_BATCHES,
    Minimum,
    micro_batches_even,
    steps_stable,
)
from autotune.burst.trial_batches import forever, make_loader
from autotune.core.errors import describe_exception, error_chain

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autotune.burst.channel import Channel
    from autotune.burst.request import BurstRequest
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec
    from autotune.engine.build import Built
    from autotune.engine.distributed import DistInfo
    from autotune.engine.step import Stepper

__all__ = [
    "Trial",
    "alloc_retries",
    "classify_exception",
    "indexed_device",
    "sync_device",
    "timed_step",
]

T = TypeVar("T")


# -- timing -----------------------------------------------------------------------------
def indexed_device(name: str) -> torch.device:
    """The device ``name`` names, a GPU with its index (``cuda`` is ``cuda:0``, the current
    one of a fresh process): ``torch.cuda.set_device`` refuses a GPU without one."""
    import torch

    device = torch.device(name)
    return torch.device("cuda", 0) if device.type == "cuda" and device.index is None else device


def sync_device(device: torch.device) -> None:
    """Wait for the device's queued work, so a clock read after it means something."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_step(
    run_step: Callable[[], T],
    device: torch.device,
    *,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, T]:
    """Seconds one whole step took: queued device work is drained before both clock reads."""
    sync_device(device)
    start = clock()
    out = run_step()
    sync_device(device)
    return clock() - start, out


# -- outcome ----------------------------------------------------------------------------
_OOM_TEXT = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(status, short reason) for an exception raised inside the trial.

    ``oom`` for ``torch.cuda.OutOfMemoryError``, ``MemoryError`` and the allocation
    failures torch reports as a plain ``RuntimeError`` (cuBLAS/cuDNN handles), anywhere
    in the exception's cause chain (torch.compile wraps the errors it meets); ``error``
    for anything else. The reason is ``describe_exception``'s one line, the rule
    ``models show`` and the trainer use for a user model's failures too.
    """
    oom_type: type[BaseException] | None
    try:
        import torch

        oom_type = torch.cuda.OutOfMemoryError
    except ImportError:  # pragma: no cover - torch is always there in a trial
        oom_type = None
    status = "error"
    for current in error_chain(exc):
        if isinstance(current, MemoryError) or (
            oom_type is not None and isinstance(current, oom_type)
        ):
            status = "oom"
            break
        if isinstance(current, RuntimeError) and any(t in str(current) for t in _OOM_TEXT):
            status = "oom"
            break
    return status, describe_exception(exc)


def _compiled_graphs() -> int | None:
    """How many graphs torch.compile (Dynamo) has built in this process: a count that
    grows during the timed steps means recompilation (dynamic shapes, a failed guard)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # a torch without Dynamo
        return None
    return int(counters["stats"]["unique_graphs"])


_micro_clock = time.perf_counter  # read after each micro-batch of a timed CPU step


def _gaps(marks: list[float]) -> list[float]:
    """The times between consecutive clock reads."""
    return [later - earlier for earlier, later in itertools.pairwise(marks)]


def _finite(value: float) -> bool:
    return math.isfinite(value)


class Trial:
    """One burst, inside the trial process."""

    def __init__(self, request: BurstRequest, channel: Channel) -> None:
        self.request = request
        self.channel = channel
        self.stage = "starting"
        self.context_bytes = 0
        self.cuda = False
        self.device: torch.device | None = None
        self.dist: DistInfo | None = None  # under torchrun: this rank's place

    def set_stage(self, name: str) -> None:
        self.stage = name
        self.channel.send("stage", name=name)

    def cuda_peak(self) -> int | None:
        if not self.cuda or self.device is None:
            return None
        from autotune.engine.memory import cuda_peak_bytes

        return cuda_peak_bytes(self.device, context_bytes=self.context_bytes)

    def run(self) -> dict[str, Any]:
        """The burst: set-up, the warm-up and timed steps, the optional verification, and
        the memory check against the budget; returns the ``result`` message's fields."""
        import torch

        from autotune.engine import memory

        req = self.request
        self.dist, device_name, config = join_ranks(req.config, req.device)
        seed = req.seed  # the same initial weights on every rank (FSDP2 does not broadcast)
        budget = req.budget_bytes
        device = indexed_device(device_name)
        self.device = device
        self.cuda = device.type == "cuda"
        _set_up_allocator(config)  # before CUDA starts: the allocator reads it once

        used_before = None
        if self.cuda:
            used_before = memory.nvml_device_used_bytes(device.index or 0)

        if req.threads:  # fewer than the cores: the machine is shared right now
            torch.set_num_threads(req.threads)
        self.set_stage("loading the model spec")
        spec = req.spec.load()
        torch.manual_seed(seed)
        if self.cuda:
            self._start_cuda(device, budget, used_before)

        self.set_stage("building the model")
        built = _build(spec, config, device, world_size=self.dist.world_size)
        stepper = built.stepper

        self.set_stage("starting the data loader")
        warmup, steps = req.warmup, req.steps
        # one process decides alone: torchrun's ranks must run the same steps
        alone = self.dist.world_size == 1
        stable = req.stable_within if alone else None
        minimum = Minimum(
            warmup_s=req.min_warmup_s if alone else 0.0,
            timed_s=req.min_timed_s if alone else 0.0,
        )
        most = minimum.most_steps(warmup, steps)
        samples = most * config.grad_accum * config.micro_batch  # one epoch: no restart
        loader = make_loader(spec, config, samples=samples, seed=seed + self.dist.rank)
        batches = forever(loader)
        failed = self._timed_steps(
            stepper, batches, config, warmup=warmup, steps=steps, stable_within=stable,
            minimum=minimum,
        )  # fmt: skip
        if failed is not None:
            return failed

        extra: dict[str, Any] = {}
        if req.profile:  # after the timed steps: their figures carry no profiler
            extra["breakdown"] = self._profile(stepper, batches, config)
        if req.verify:
            failed, extra = self._verify(spec, built, config)
            if failed is not None:
                return failed

        batches.close()  # drops the loader's iterator: its DataLoader workers shut down
        return across_ranks(self.dist, self._check_budget(budget, used_before, **extra), budget)

    def _start_cuda(
        self, device: torch.device, budget: int | None, used_before: int | None
    ) -> None:
        """Create the CUDA context, measure it, and cap the allocator at the budget."""
        import torch

        from autotune.engine import memory

        self.set_stage("starting CUDA")
        torch.cuda.set_device(device)
        # A first matmul creates the context and loads cuBLAS, so the context measured
        # next is close to what the run holds outside the allocator.
        a = torch.ones(64, 64, device=device)
        (a @ a).sum().item()
        del a
        context = memory.measure_cuda_context(device, device_used_before=used_before)
        self.context_bytes = context.bytes
        self.channel.send("context", bytes=context.bytes, method=context.method)
        if budget is not None:
            fraction = memory.cap_cuda_memory(budget, device=device, context_bytes=context.bytes)
            self.channel.send("cap", fraction=fraction)

    def _timed_steps(
        self,
        stepper: Stepper,
        batches: Iterator[Batch],
        config: TrainConfig,
        *,
        warmup: int,
        steps: int,
        stable_within: float | None = None,
        minimum: Minimum | None = None,
    ) -> dict[str, Any] | None:
        """The warm-up steps, then the timed ones, each reported on the channel; the
        ``nan`` result at the first non-finite loss, else None. With ``stable_within``
        the timed steps end once their times agree within it (``steps_stable``), or after
        the first where that step's micro-batches ran evenly on the CPU
        (``micro_batches_even``), and the ``minimum`` time is spent; ``minimum`` adds
        steps to a phase shorter than its time (``more_steps``). One process decides
        alone: torchrun's ranks get neither."""
        import torch

        from autotune.engine.step import to_device

        device = stepper.device
        # the CPU runs a micro-batch before the next begins: a clock read after each times
        # it (a CUDA step's micro-batches are queued: timing them would drain the queue)
        marks: list[float] | None = (
            [] if stable_within is not None and device.type == "cpu" else None
        )

        def one_step(micro_batches: int = config.grad_accum) -> Any:
            micro = [
                to_device(next(batches), device, non_blocking=config.pin_memory)
                for _ in range(micro_batches)
            ]
            if marks is None:
                return stepper.step(micro)
            marks[:] = [_micro_clock()]
            mark = marks.append
            return stepper.step(micro, after_micro_batch=lambda _: mark(_micro_clock()))

        def first_step() -> Any:  # the first warm-up: one-time work, not a whole step
            return one_step(min(FIRST_WARMUP_MICRO_BATCHES, config.grad_accum))

        compiled = config.compile != "off"
        minimum = minimum or Minimum()
        timed: list[float] = []
        warm: list[float] = []
        self.channel.send("ready", threads=torch.get_num_threads())
        while True:
            is_warmup = minimum.more_warmup(warm, warmup)
            if not is_warmup and not minimum.more_timed(timed, steps):
                break
            index = len(warm) if is_warmup else len(timed)
            phase = "warm-up" if is_warmup else "timed"
            total = warmup if is_warmup else steps
            self.stage = f"{phase} step {index + 1} of {total}"
            if index >= total:  # past the count: the phase's minimum time is not spent yet
                least = minimum.warmup_s if is_warmup else minimum.timed_s
                self.stage = f"{phase} step {index + 1} (at least {least:g} s of them)"
            first = is_warmup and not warm
            seconds, out = timed_step(first_step if first else one_step, device)
            (warm if is_warmup else timed).append(seconds)
            loss = out.loss_value()
            self.channel.send(
                "warmup" if is_warmup else "step",
                index=index,
                time_s=seconds,
                loss=loss,
                peak_bytes=self.cuda_peak(),
                graphs=_compiled_graphs() if compiled else None,
            )
            if not _finite(loss):
                return self.result("nan", f"loss is {loss} at {self.stage}")
            if is_warmup or stable_within is None or sum(timed) < minimum.timed_s:
                continue
            if index + 1 < steps and steps_stable(timed, stable_within):
                break
            if index == 0 and marks and micro_batches_even(_gaps(marks), stable_within):
                break  # its first timed step ran evenly: the screen's figure
        return None

    def _profile(
        self, stepper: Stepper, batches: Iterator[Batch], config: TrainConfig
    ) -> dict[str, Any]:
        """A few profiled steps: where their time went (``autotune.explain``)."""
        from autotune.explain.breakdown import profile_steps, profiled_step_count

        self.set_stage("profiling")
        steps = profiled_step_count(self.request.profile_steps, config.grad_accum)
        trace = self.request.trace_path
        return profile_steps(stepper, batches, config, steps=steps, trace_path=trace).to_dict()

    def _verify(
        self, spec: ModelSpec, built: Built, config: TrainConfig
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """An eval step on a fresh batch and a checkpoint save: (the failed result or None,
        the figures for the result: ``eval_loss``, ``checkpoint_bytes``, ``verify_s``).
        The eval step runs the module the trainer evaluates (``Trainer.evaluate``: the
        raw model, whose blocks only ``compile_regions`` compiled in place), so a model
        compiled whole compiles no forward-only graph here that training never would."""
        import torch

        from autotune.engine.step import autocast_context, to_device

        model, stepper = built.raw, built.stepper
        device = stepper.device
        seed = self.request.seed
        extra: dict[str, Any] = {}
        started = time.perf_counter()
        self.set_stage("verifying: eval step")
        try:
            model.eval()
            generator = torch.Generator().manual_seed(seed + 1)
            batch = spec.make_batch(
                batch_size=2 * config.micro_batch, seq_len=config.seq_len, generator=generator
            )
            with torch.no_grad(), autocast_context(config, device):
                eval_loss = float(spec.loss(model, to_device(batch, device)).float().item())
            model.train()
            if not _finite(eval_loss):
                failed = self.result("nan", f"eval loss is {eval_loss} on a verification batch")
                return failed, extra
            self.set_stage("verifying: checkpoint save")
            extra["eval_loss"] = eval_loss
            folder = self.request.workdir
            if folder is None:  # the child fills it in: a Trial built without one
                raise RuntimeError("the trial has no folder to save its checkpoint in")
            extra["checkpoint_bytes"] = _save_checkpoint(
                Path(folder) / "checkpoint.pt",
                built.model,
                built.optimizer,
                stepper,
                config,
                dist=self.dist,
            )
            extra["verify_s"] = time.perf_counter() - started
        except Exception as exc:
            _, reason = classify_exception(exc)
            return self.result("error", f"verification failed ({self.stage}): {reason}"), extra
        return None, extra

    def _check_budget(
        self, budget: int | None, used_before: int | None, **extra: Any
    ) -> dict[str, Any]:
        """The final result: ``ok``, or ``oom`` where the CUDA peak (the context measured
        again, kernels loaded during the steps grow it) passed the budget."""
        from autotune.core.units import format_bytes, over_budget
        from autotune.engine import memory

        status, reason = "ok", ""
        if self.cuda and self.device is not None:
            later = memory.measure_cuda_context(self.device, device_used_before=used_before)
            self.context_bytes = max(self.context_bytes, later.bytes)
            peak = self.cuda_peak()
            if (over := over_budget(peak, budget)) is not None:
                context = format_bytes(self.context_bytes)
                status, reason = "oom", f"{over} (reserved plus a context of {context})"
        return self.result(status, reason, **extra)

    def result(self, status: str, reason: str, **fields: Any) -> dict[str, Any]:
        from autotune.engine.memory import own_peak_rss_bytes

        peak = None
        if self.cuda:
            try:
                peak = self.cuda_peak()
            except Exception:  # a broken CUDA state must not hide the real outcome
                peak = None
        return {
            "status": status,
            "reason": reason,
            "stage": self.stage,
            "peak_bytes": peak,
            "context_bytes": self.context_bytes if self.cuda else None,
            "own_peak_rss_bytes": own_peak_rss_bytes(),
            "alloc_retries": alloc_retries(self.device) if self.cuda else None,
            **fields,
        }


def _set_up_allocator(config: TrainConfig) -> None:
    """The CUDA caching allocator's settings of ``config`` (expandable segments) in this
    process's ``PYTORCH_CUDA_ALLOC_CONF``, as the trainer sets them."""
    from autotune.engine.step import apply_allocator_settings

    apply_allocator_settings(config)


def alloc_retries(device: torch.device | None) -> int | None:
    """How often the CUDA caching allocator had to free its cache and retry an allocation
    (``num_alloc_retries``): a config that needed it runs at the edge of its memory."""
    import torch

    try:
        return int(torch.cuda.memory_stats(device).get("num_alloc_retries", 0))
    except Exception:  # a broken CUDA state must not hide the real outcome
        return None


def _build(
    spec: ModelSpec, config: TrainConfig, device: torch.device, *, world_size: int = 1
) -> Built:
    """The model, its optimizer and the step function, built as the trainer builds them
    (``autotune.engine.build``; under torchrun: wrapped in DDP or sharded by FSDP2 with
    the config's knobs)."""
    from autotune.engine.build import build_training

    return build_training(spec, config, device, world_size=world_size)


def _save_checkpoint(
    path: Path,
    model: nn.Module,
    optimizer: Any,
    stepper: Any,
    config: TrainConfig,
    *,
    dist: DistInfo | None = None,
) -> int:
    """Model and optimizer state, written atomically; returns its size in bytes. Under
    torchrun rank 0 writes it (FSDP: after every rank gathered the whole state)."""
    import torch

    from autotune.core.files import atomic_writer

    module = getattr(model, "_orig_mod", model)  # the module under torch.compile
    model_state, optim_state = rank_state(module, optimizer, config, dist)
    if dist is not None and not dist.is_main:
        return 0
    state = {
        "model": model_state,
        "optimizer": optim_state,
        "stepper": stepper.state_dict(),
        "config": config.to_dict(),
    }
    with atomic_writer(path, binary=True) as f:
        torch.save(state, f)
    return path.stat().st_size
