"""The inside of a burst: the code that runs in the trial's own process.

Started by ``autotune.burst.supervisor.run_burst`` as ``python -m autotune.burst.child REQUEST FD``:
``REQUEST`` is a pickle written by the parent (the spec's source or the pickled spec, the
config, the step counts, the budget), ``FD`` a pipe on which this process writes one JSON
object per line:

    {"type": "stage", "name": "building the model"}
    {"type": "context", "bytes": 5.2e8, "method": "nvml-process"}           (CUDA only)
    {"type": "ready", "threads": N}                    (the first step starts now; torch's
                                                        intra-op threads)
    {"type": "warmup" | "step", "index": 0, "time_s": 0.12, "loss": 2.3, "peak_bytes": ...}
    {"type": "result", "status": "ok" | "oom" | "nan" | "error", "reason": "...", ...}

The parent classifies the outcome from these messages alone: a process that dies without
a ``result`` crashed, one that is still running at the deadline timed out. Nothing here
prints to stdout or stderr on purpose; both go to a log the parent keeps for context.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import sys
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from autotune.core.errors import describe_exception

if TYPE_CHECKING:
    import torch
    from torch import nn

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch, ModelSpec
    from autotune.engine.step import Stepper
    from autotune.train.distributed import DistInfo

__all__ = ["classify_exception", "main", "sync_device", "timed_step"]

T = TypeVar("T")

# How many micro-batches' worth of distinct synthetic samples the data set cycles over.
POOL_MICRO_BATCHES = 4


class Channel:
    """JSON lines to the parent. A parent that is gone ends this process quietly."""

    def __init__(self, fd: int) -> None:
        self._out: TextIO = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, kind: str, **fields: Any) -> None:
        try:
            self._out.write(json.dumps({"type": kind, **fields}) + "\n")
            self._out.flush()
        except BrokenPipeError:
            os._exit(3)


# -- timing -----------------------------------------------------------------------------
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
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, MemoryError) or (
            oom_type is not None and isinstance(current, oom_type)
        ):
            status = "oom"
            break
        if isinstance(current, RuntimeError) and any(t in str(current) for t in _OOM_TEXT):
            status = "oom"
            break
        current = current.__cause__ or current.__context__
    return status, describe_exception(exc)


# -- data -------------------------------------------------------------------------------
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


# -- the trial --------------------------------------------------------------------------
def _load_spec(request: Mapping[str, Any]) -> ModelSpec:
    from autotune.models.registry import load_model

    if request.get("spec") is not None:
        spec: ModelSpec = request["spec"]
        return spec
    spec = load_model(request["spec_source"])
    args = dict(request["spec_args"])
    if dict(spec.args) != args:
        spec = spec.with_args(**args)
    return spec


def _compiled_graphs() -> int | None:
    """How many graphs torch.compile (Dynamo) has built in this process: a count that
    grows during the timed steps means recompilation (dynamic shapes, a failed guard)."""
    try:
        from torch._dynamo.utils import counters
    except Exception:  # a torch without Dynamo
        return None
    return int(counters["stats"]["unique_graphs"])


def _finite(value: float) -> bool:
    return math.isfinite(value)


class Trial:
    """One burst, inside the trial process."""

    def __init__(self, request: Mapping[str, Any], channel: Channel) -> None:
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
        self.dist, device_name, config = _join_ranks(req["config"], req["device"])
        seed: int = req["seed"]  # the same initial weights on every rank (FSDP2 does not broadcast)
        budget: int | None = req["budget_bytes"]
        device = torch.device(device_name)
        self.device = device
        self.cuda = device.type == "cuda"
        _set_up_allocator(config)  # before CUDA starts: the allocator reads it once

        used_before = None
        if self.cuda:
            index = device.index if device.index is not None else 0
            used_before = memory.nvml_device_used_bytes(index)

        if req.get("threads"):  # fewer than the cores: the machine is shared right now
            torch.set_num_threads(int(req["threads"]))
        self.set_stage("loading the model spec")
        spec = _load_spec(req)
        torch.manual_seed(seed)
        if self.cuda:
            self._start_cuda(device, budget, used_before)

        self.set_stage("building the model")
        model, optimizer, stepper = _build(spec, config, device, world_size=self.dist.world_size)

        self.set_stage("starting the data loader")
        warmup, steps = req["warmup"], req["steps"]
        micro_batches = (warmup + steps) * config.grad_accum
        samples = micro_batches * config.micro_batch
        loader = make_loader(spec, config, samples=samples, seed=seed + self.dist.rank)
        batches = forever(loader)
        failed = self._timed_steps(stepper, batches, config, warmup=warmup, steps=steps)
        if failed is not None:
            return failed

        extra: dict[str, Any] = {}
        if req["verify"]:
            failed, extra = self._verify(spec, model, optimizer, stepper, config)
            if failed is not None:
                return failed

        batches.close()  # drops the loader's iterator: its DataLoader workers shut down
        return _across_ranks(self.dist, self._check_budget(budget, used_before, **extra), budget)

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
    ) -> dict[str, Any] | None:
        """The warm-up steps, then the timed ones, each reported on the channel; the
        ``nan`` result at the first non-finite loss, else None."""
        import torch

        from autotune.engine.step import to_device

        device = stepper.device

        def one_step() -> Any:
            micro = [
                to_device(next(batches), device, non_blocking=config.pin_memory)
                for _ in range(config.grad_accum)
            ]
            return stepper.step(micro)

        compiled = config.compile != "off"
        self.channel.send("ready", threads=torch.get_num_threads())
        for i in range(warmup + steps):
            is_warmup = i < warmup
            index = i if is_warmup else i - warmup
            phase = "warm-up" if is_warmup else "timed"
            total = warmup if is_warmup else steps
            self.stage = f"{phase} step {index + 1} of {total}"
            seconds, out = timed_step(one_step, device)
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
        return None

    def _verify(
        self,
        spec: ModelSpec,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        stepper: Stepper,
        config: TrainConfig,
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """An eval step on a fresh batch and a checkpoint save: (the failed result or None,
        the figures for the result: ``eval_loss``, ``checkpoint_bytes``)."""
        import torch

        from autotune.engine.step import autocast_context, to_device

        device = stepper.device
        seed: int = self.request["seed"]
        extra: dict[str, Any] = {}
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
            extra["checkpoint_bytes"] = _save_checkpoint(
                Path(self.request["workdir"]) / "checkpoint.pt",
                model,
                optimizer,
                stepper,
                config,
                dist=self.dist,
            )
        except Exception as exc:
            _, reason = classify_exception(exc)
            return self.result("error", f"verification failed ({self.stage}): {reason}"), extra
        return None, extra

    def _check_budget(
        self, budget: int | None, used_before: int | None, **extra: Any
    ) -> dict[str, Any]:
        """The final result: ``ok``, or ``oom`` where the CUDA peak (the context measured
        again, kernels loaded during the steps grow it) passed the budget."""
        from autotune.core.units import format_bytes
        from autotune.engine import memory

        status, reason = "ok", ""
        if self.cuda and self.device is not None:
            later = memory.measure_cuda_context(self.device, device_used_before=used_before)
            self.context_bytes = max(self.context_bytes, later.bytes)
            peak = self.cuda_peak()
            if budget is not None and peak is not None and peak > budget:
                status = "oom"
                reason = (
                    f"peak {format_bytes(peak)} (reserved plus a context of "
                    f"{format_bytes(self.context_bytes)}) passed the budget of "
                    f"{format_bytes(budget)}"
                )
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
) -> tuple[nn.Module, torch.optim.Optimizer, Stepper]:
    """The model, its optimizer and the step function, as the trainer builds them (under
    torchrun: wrapped in DDP or sharded by FSDP2 with the config's knobs)."""
    from autotune.engine.parallel import wrap_model
    from autotune.engine.step import (
        Stepper,
        apply_backend_flags,
        compile_model,
        make_optimizer,
        prepare_model,
    )

    raw = prepare_model(spec, config, device)
    model = compile_model(wrap_model(raw, config, device, world_size=world_size), config)
    optimizer = make_optimizer(raw, config)  # fused per config.fused_optimizer
    apply_backend_flags(config, device)
    stepper = Stepper(model, optimizer, config=config, device=device, loss_fn=spec.loss_fn)
    return model, optimizer, stepper


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
    model_state, optim_state = _rank_state(module, optimizer, config, dist)
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


# -- several processes (torchrun; autotune/config/parallel.py) ----------------------------------
class FailuresOnly(Channel):
    """A rank other than 0 under torchrun: it speaks only to report its own failure (an
    out-of-memory, an error); rank 0 reports the steps and the result."""

    def __init__(self, fd: int, rank: int) -> None:
        super().__init__(fd)
        self.rank = rank

    def send(self, kind: str, **fields: Any) -> None:
        if kind == "result" and fields.get("status") != "ok":
            fields["reason"] = f"rank {self.rank}: {fields.get('reason', '')}"
            super().send(kind, **fields)


def _open_channel(arg: str) -> Channel:
    """The parent's pipe: a descriptor number, or under torchrun (whose workers inherit no
    descriptors) the path of a FIFO every rank opens; ranks other than 0 filtered."""
    fd = int(arg) if arg.isdigit() else os.open(arg, os.O_WRONLY)
    rank = int(os.environ.get("RANK", "0") or 0)
    return Channel(fd) if rank == 0 else FailuresOnly(fd, rank)


def _join_ranks(config: TrainConfig, device: str) -> tuple[DistInfo, str, TrainConfig]:
    """This rank's place (a world of one outside torchrun), its device and the config it
    runs: ``grad_accum / world size`` micro-batches, so the global batch is the config's."""
    from autotune.train.distributed import init_distributed, per_rank_config

    info, device = init_distributed(device)
    return info, device, per_rank_config(config, info.world_size)


def _across_ranks(
    dist: DistInfo | None, result: dict[str, Any], budget: int | None
) -> dict[str, Any]:
    """Rank 0's result with the memory figures of the busiest rank (peaks are per rank: a
    budget is each process's) and the first failure any rank saw."""
    if dist is None or not dist.enabled:
        return result
    from autotune.core.units import format_bytes
    from autotune.train.distributed import all_gather_objects

    keys = ("status", "reason", "peak_bytes", "own_peak_rss_bytes")
    ranks = all_gather_objects(dist, {k: result.get(k) for k in keys})
    out = dict(result)
    for key in ("peak_bytes", "own_peak_rss_bytes"):
        values = [r[key] for r in ranks if r[key] is not None]
        out[key] = max(values) if values else None
    failed = [(i, r) for i, r in enumerate(ranks) if r["status"] != "ok"]
    if failed:
        rank, first = failed[0]
        out["status"], out["reason"] = first["status"], f"rank {rank}: {first['reason']}"
    elif budget is not None and out["peak_bytes"] is not None and out["peak_bytes"] > budget:
        out["status"] = "oom"
        out["reason"] = (
            f"a rank's peak {format_bytes(out['peak_bytes'])} passed the budget of "
            f"{format_bytes(budget)}"
        )
    out["ranks"] = dist.world_size
    return out


def _rank_state(
    module: nn.Module, optimizer: Any, config: TrainConfig, dist: DistInfo | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    from autotune.engine.parallel import full_state, is_sharded

    if dist is not None and is_sharded(config, dist.world_size):
        return full_state(module, optimizer)
    return module.state_dict(), optimizer.state_dict()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m autotune.burst.child REQUEST_PATH RESULT_FD", file=sys.stderr)
        return 2
    channel = _open_channel(args[1])
    _no_core_dumps()
    parent = int(os.environ.get("AUTOTUNE_BURST_PARENT", "0") or 0) or os.getppid()
    _follow_parent(parent, workdir=Path(args[0]).parent)
    channel.send("stage", name="importing")
    trial: Trial | None = None
    try:
        with open(args[0], "rb") as f:
            request = pickle.load(f)
        trial = Trial(request, channel)
        outcome = trial.run()
    except BaseException as exc:  # the parent must hear about every way this can end
        status, reason = classify_exception(exc)
        stage = trial.stage if trial is not None else "starting"
        reason = f"{reason} (during {stage})"
        outcome = (
            trial.result(status, reason)
            if trial is not None
            else {
                "status": status,
                "reason": reason,
                "stage": stage,
            }
        )
    channel.send("result", **outcome)
    # Done: skip the interpreter's teardown (seconds with torch loaded). The parent ends
    # whatever is left of the group (DataLoader workers of an early return).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _follow_parent(ppid: int, *, workdir: Path) -> None:
    """End this trial's whole process group if the parent dies (it can no longer time us
    out or read the result), checked twice a second on a daemon thread. The parent would
    have removed the trial's temporary folder (``workdir``, made by ``run_burst``); a
    parent killed outright cannot, so the trial does. ``ppid`` is the parent's pid as the
    parent said it (``AUTOTUNE_BURST_PARENT``): a parent killed while this process
    started is already gone by now, and ``os.getppid()`` would name its adopter."""
    import shutil
    import signal
    import threading

    alive = _parent_check(ppid)

    def watch() -> None:
        while alive():
            time.sleep(0.5)
        import psutil

        for child in psutil.Process().children(recursive=True):  # DataLoader workers: none
            with contextlib.suppress(psutil.Error):  # may write in the folder as it goes
                child.kill()
        if workdir.name.startswith("autotune-burst-"):  # run_burst's own, never a user's
            for _ in range(3):  # this process's main thread may still be writing in it
                shutil.rmtree(workdir, ignore_errors=True)
                if not workdir.exists():
                    break
                time.sleep(0.05)
        if os.getpgrp() == os.getpid():  # our own group (run_burst starts us in one)
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(1)

    threading.Thread(target=watch, name="autotune-parent-watch", daemon=True).start()


def _parent_check(ppid: int) -> Callable[[], bool]:
    """Whether the search process ``ppid`` still runs: our parent, or under torchrun (the
    launcher is our parent) the same process that was there when we started."""
    if os.getppid() == ppid:
        return lambda: os.getppid() == ppid
    import psutil

    try:
        created = psutil.Process(ppid).create_time()
    except psutil.Error:
        return lambda: False

    def alive() -> bool:
        try:
            return bool(psutil.Process(ppid).create_time() == created)
        except psutil.Error:
            return False

    return alive


def _no_core_dumps() -> None:
    """A crashing trial must not write a core file the size of its memory."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ImportError, ValueError, OSError):
        pass


if __name__ == "__main__":
    sys.exit(main())
