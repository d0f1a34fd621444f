"""Where one config's step goes: a profiled run of a few optimizer steps inside the trial
(``profile_steps``) and its parse into a ``Breakdown`` record.

The steps are timed by the burst's own clock (device work drained before both reads) and
profiled by ``torch.profiler`` (CPU activities; CUDA kernels too where there is a GPU).
The phases are ``record_function`` ranges: ``autotune.data_wait`` and ``autotune.h2d``
here, ``autotune.forward``, ``autotune.backward`` and ``autotune.optimizer`` in the one
step function (``Stepper.profile``). They never nest in one another, so the named parts
add up without double counting; ``rest`` is the step's time outside them (Python, launch
overhead, synchronization). Per-module times come from ranges that forward hooks open
around each direct child of the model (a container's children in its place); a child's
backward is the autograd functions whose sequence numbers its forward ops recorded.

These steps run after the burst's timed ones, so its figures never carry the profiler's
overhead.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.core.plain import MEASURED, from_plain, to_plain

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.autograd.profiler_util import FunctionEvent

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import Batch
    from autotune.engine.step import Stepper

__all__ = [
    "PARTS",
    "Breakdown",
    "parse_events",
    "profile_steps",
    "profiled_step_count",
    "top_modules",
]

# The named parts of a step, in the order a table lists them ("rest" is what is left).
PARTS = ("data_wait", "h2d", "forward", "backward", "optimizer")
_PREFIX = "autotune."
_MODEL = _PREFIX + "model"
_MODULE = _PREFIX + "module:"
_EVALUATE = "autograd::engine::evaluate_function"
_COMPUTE = tuple(_PREFIX + p for p in ("h2d", "forward", "backward", "optimizer"))
LOSS = "loss"  # forward time outside the model (the loss computation), and its backward
OWN = "(model's own ops)"  # inside the model's forward, outside its direct children
ENGINE = "(autograd engine)"  # backward time no forward op of a module accounts for


@dataclass(frozen=True, kw_only=True)
class Breakdown:
    """Seconds per optimizer step, by part, over ``steps`` profiled steps.

    ``parts`` holds each of ``PARTS`` and ``rest`` (they sum to ``step_s``); ``modules``
    maps each direct child of the model (plus ``loss``, ``OWN`` and ``ENGINE``) to its
    ``forward`` and ``backward`` seconds (empty where per-module times are unavailable,
    ``modules_note`` says why). ``op_s`` is the time inside operators (outermost aten
    ops) and ``ops_per_step`` their count; ``device_busy_s`` the GPU's kernel time (CUDA
    only). ``compile_s`` is the one-off compilation, never part of a step.
    """

    device: str
    steps: int
    step_s: float
    parts: Mapping[str, float]
    modules: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    modules_note: str = ""
    op_s: float = 0.0
    ops_per_step: float = 0.0
    device_busy_s: float | None = None
    compile_s: float | None = None
    trace_path: str | None = None

    def share(self, part: str) -> float:
        """``part``'s share of the step (0 where the step took no time)."""
        return self.parts.get(part, 0.0) / self.step_s if self.step_s > 0 else 0.0

    @property
    def named_s(self) -> float:
        """The named parts' total (the step less ``rest``)."""
        return sum(self.parts.get(p, 0.0) for p in PARTS)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Breakdown:
        """The inverse of ``to_dict`` (unknown keys ignored)."""
        return from_plain(cls, data, path="breakdown", converters=MEASURED)


# -- the profiled steps (in the trial) --------------------------------------------------
# The micro-batches a profile covers at most, in whole steps (at least one): the profiler
# keeps an event per operator call in memory, and three steps of 32 micro-batches of a
# model that loops over its tokens (pointer-gen's naive config) held about 15 GB until the
# kernel's OOM killer ended the trial.
MAX_PROFILED_MICRO_BATCHES = 8


def profiled_step_count(steps: int, grad_accum: int) -> int:
    """How many of ``steps`` requested steps to profile for a config that accumulates
    ``grad_accum`` micro-batches a step: one step of many micro-batches is sample enough."""
    return max(1, min(steps, MAX_PROFILED_MICRO_BATCHES // max(1, grad_accum)))


def profile_steps(
    stepper: Stepper,
    batches: Iterator[Batch],
    config: TrainConfig,
    *,
    steps: int,
    trace_path: str | None = None,
) -> Breakdown:
    """Run ``steps`` optimizer steps under the profiler and say where their time went;
    the Chrome trace (opens in Perfetto) is written to ``trace_path`` if given."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from autotune.engine.step import profiled_phase, to_device

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps=}")
    device = stepper.device
    cuda = device.type == "cuda"

    def one_step() -> None:
        micro = []
        for _ in range(config.grad_accum):
            with profiled_phase("data_wait", device):
                batch = next(batches)
            with profiled_phase("h2d", device):
                micro.append(to_device(batch, device, non_blocking=config.pin_memory))
        with record_function(_PREFIX + "step"):
            stepper.step(micro)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    model = _inner(stepper.model)
    note = "" if config.compile == "off" else "compiled: per-module times need compile off"
    times: list[float] = []
    stepper.profile = True
    try:
        with (
            _module_ranges(model) if not note else contextlib.nullcontext(),
            profile(activities=activities) as prof,
        ):
            for _ in range(steps):
                _sync(device)
                start = time.perf_counter()
                one_step()
                _sync(device)
                times.append(time.perf_counter() - start)
    finally:
        stepper.profile = False
    if trace_path:
        _export_trace(prof, Path(trace_path))
    breakdown = parse_events(
        list(prof.events()), step_times=times, device=str(device), modules=not note
    )
    if note or trace_path:
        from dataclasses import replace

        breakdown = replace(breakdown, modules_note=note, trace_path=trace_path)
    if cuda:
        torch.cuda.synchronize(device)
    return breakdown


def _sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _inner(model: nn.Module) -> nn.Module:
    """The user's module under torch.compile's and DDP's wrappers."""
    inner = getattr(model, "_orig_mod", model)
    return getattr(inner, "module", inner) if hasattr(inner, "no_sync") else inner


def top_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's direct children, those of a container (``ModuleList``,
    ``ModuleDict``: never called itself) in its place as ``name.key``."""
    from torch import nn

    found: list[tuple[str, nn.Module]] = []
    for name, child in model.named_children():
        if isinstance(child, nn.ModuleList | nn.ModuleDict):
            found.extend((f"{name}.{key}", inner) for key, inner in child.named_children())
        else:
            found.append((name, child))
    return found


@contextlib.contextmanager
def _module_ranges(model: nn.Module) -> Iterator[None]:
    """A profiler range around the model's forward and each direct child's forward."""
    from torch.autograd.profiler import record_function

    open_ranges: dict[int, list[Any]] = {}
    handles = []

    def hooks(module: nn.Module, name: str) -> None:
        def pre(_module: nn.Module, _args: Any) -> None:
            rf = record_function(name)
            rf.__enter__()
            open_ranges.setdefault(id(module), []).append(rf)

        def post(_module: nn.Module, _args: Any, _out: Any) -> None:
            stack = open_ranges.get(id(module))
            if stack:
                stack.pop().__exit__(None, None, None)

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))

    hooks(model, _MODEL)
    for name, child in top_modules(model):
        hooks(child, _MODULE + name)
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


# -- the parse --------------------------------------------------------------------------
def _ancestors(event: FunctionEvent) -> Iterator[FunctionEvent]:
    parent = event.cpu_parent
    while parent is not None:
        yield parent
        parent = parent.cpu_parent


def _dur(event: FunctionEvent) -> float:
    return float(event.time_range.end - event.time_range.start) * 1e-6  # us -> s


def _inside(event: FunctionEvent, ranges: Sequence[tuple[float, float]]) -> bool:
    start = event.time_range.start
    return any(lo <= start <= hi for lo, hi in ranges)


def parse_events(
    events: Sequence[FunctionEvent],
    *,
    step_times: Sequence[float],
    device: str,
    modules: bool = True,
) -> Breakdown:
    """The ``Breakdown`` of ``len(step_times)`` profiled steps from their profiler events:
    each part is its ranges' total per step; ``rest`` the step's time outside them."""
    n = len(step_times)
    if n < 1:
        raise ValueError("a breakdown needs at least one profiled step")
    step_s = sum(step_times) / n
    cpu = [e for e in events if not _is_kernel(e)]
    parts = {p: sum(_dur(e) for e in cpu if e.name == _PREFIX + p) / n for p in PARTS}
    parts["rest"] = step_s - sum(parts.values())
    compute = [(e.time_range.start, e.time_range.end) for e in cpu if e.name in _COMPUTE]
    ops = [
        e
        for e in cpu
        if _is_op(e.name) and _inside(e, compute) and not any(_is_op(a.name) for a in _ancestors(e))
    ]
    kernels = [e for e in events if _is_kernel(e)]
    return Breakdown(
        device=device,
        steps=n,
        step_s=step_s,
        parts=parts,
        modules=_module_times(cpu, n) if modules else {},
        op_s=sum(_dur(e) for e in ops) / n,
        ops_per_step=len(ops) / n,
        device_busy_s=_busy(kernels) / n if kernels else None,
    )


def _is_op(name: str) -> bool:
    """An operator: an aten op, or a region torch.compile built (its kernels inside)."""
    return name.startswith("aten::") or "Compiled" in name


def _is_kernel(event: FunctionEvent) -> bool:
    return str(getattr(event, "device_type", "")).endswith("CUDA")


def _busy(kernels: Sequence[FunctionEvent]) -> float:
    """Seconds at least one kernel ran (the union of their intervals)."""
    total, end = 0.0, float("-inf")
    for e in sorted(kernels, key=lambda k: k.time_range.start):
        lo, hi = float(e.time_range.start), float(e.time_range.end)
        if hi > end:
            total += hi - max(lo, end)
            end = hi
    return total * 1e-6


def _module_times(cpu: Sequence[FunctionEvent], n: int) -> dict[str, dict[str, float]]:
    """Forward and backward seconds per step of each direct child, the loss, the model's
    own ops and the autograd engine's unattributed backward time."""
    forward = [e for e in cpu if e.name == _PREFIX + "forward"]
    backward = [e for e in cpu if e.name == _PREFIX + "backward"]
    if not forward:
        return {}
    under_forward = [(e.time_range.start, e.time_range.end) for e in forward]
    times: dict[str, dict[str, float]] = {}
    owner: dict[int, str] = {}  # forward op's sequence number -> its module (or the loss)
    for rng in (e for e in cpu if e.name.startswith(_MODULE) and _inside(e, under_forward)):
        name = rng.name[len(_MODULE) :]
        times.setdefault(name, {"forward": 0.0, "backward": 0.0})["forward"] += _dur(rng)
        for op in _descendants(rng):
            if op.sequence_nr >= 0:
                owner[op.sequence_nr] = name
    model_s = sum(_dur(e) for e in cpu if e.name == _MODEL and _inside(e, under_forward))
    children_s = sum(t["forward"] for t in times.values())
    times[OWN] = {"forward": max(0.0, model_s - children_s), "backward": 0.0}
    times[LOSS] = {"forward": max(0.0, sum(map(_dur, forward)) - model_s), "backward": 0.0}
    for rng in (e for e in cpu if e.name == _MODEL and _inside(e, under_forward)):
        for op in _descendants(rng):
            if op.sequence_nr >= 0:
                owner.setdefault(op.sequence_nr, OWN)
    under_backward = [(e.time_range.start, e.time_range.end) for e in backward]
    attributed = 0.0
    for ev in cpu:
        if not ev.name.startswith(_EVALUATE) or not _inside(ev, under_backward):
            continue
        if any(a.name.startswith(_EVALUATE) for a in _ancestors(ev)):
            continue  # nested (reentrant checkpointing): counted with its outer function
        name = owner.get(ev.sequence_nr, LOSS if ev.sequence_nr >= 0 else ENGINE)
        times.setdefault(name, {"forward": 0.0, "backward": 0.0})["backward"] += _dur(ev)
        attributed += _dur(ev)
    engine = times.setdefault(ENGINE, {"forward": 0.0, "backward": 0.0})
    engine["backward"] += max(0.0, sum(map(_dur, backward)) - attributed)
    return {k: {p: s / n for p, s in v.items()} for k, v in times.items()}


def _descendants(event: FunctionEvent) -> Iterator[FunctionEvent]:
    for child in event.cpu_children:
        yield child
        yield from _descendants(child)


def _export_trace(prof: Any, path: Path) -> None:
    """The profiler's Chrome trace at ``path``, written beside it and renamed into place:
    the profiler wrote through a link at ``path`` to its target, and over a device node,
    which it replaced with a file (``/dev/null``, as root)."""
    from autotune.core.files import check_output_path, file_mode

    check_output_path(path)
    # the ending kept (torch writes gzip for .gz), the name once (a long one was too long)
    ending = "".join(path.suffixes[-2:])
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=".trace.", suffix=f".tmp{ending}")
    os.close(fd)
    tmp = Path(name)
    try:
        prof.export_chrome_trace(str(tmp))
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def is_chrome_trace(path: Path) -> bool:
    """Whether ``path`` holds a Chrome trace, as the profiler writes one (JSON whose first
    kilobytes name ``traceEvents`` or ``schemaVersion``; gzipped for a name ending .gz):
    what ``--trace`` may replace."""
    import gzip

    from autotune.core.files import file_head

    head = file_head(path)
    if head.startswith(b"\x1f\x8b"):
        try:
            with gzip.open(path, "rb") as file:
                head = file.read(4096)
        except (OSError, EOFError):
            return False
    return head.lstrip().startswith(b"{") and (
        b'"traceEvents"' in head or b'"schemaVersion"' in head
    )
