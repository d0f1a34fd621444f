"""The one step function (docs/design.md, principle 1).

The burst that measures a config and the trainer that runs it both call ``Stepper.step``:
autocast, the fp16 GradScaler, gradient accumulation (with ``no_sync`` under DDP), grad
clipping, the optimizer step and ``zero_grad(set_to_none=True)`` live here and nowhere
else. What was measured is what is run.

So do the settings around it that both share: the model's build and placement
(``prepare_model``: channels-last for a convolutional model, with the step laying its
inputs out to match; its linear layers in float8, before compile), the optimizer (fused
AdamW), ``torch.compile``'s mode, the process's numerics flags (TF32, cuDNN autotuning)
and the CUDA allocator's expandable segments (``apply_allocator_settings``, before CUDA
starts).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from autotune.config.knobs import backend_settings, env_settings, environment
from autotune.config.train_config import TrainConfig
from autotune.core.device_caps import torchao_problem
from autotune.core.errors import ConfigError
from autotune.machine.compile_cache import keep_precompiled_headers, trust_vector_isa_check

if TYPE_CHECKING:
    from autotune.contract.spec import Batch, ModelSpec

__all__ = [
    "StepOutput",
    "Stepper",
    "ALLOC_CONF_VAR",
    "allocator_conf",
    "apply_allocator_settings",
    "apply_backend_flags",
    "autocast_context",
    "channels_last_batch",
    "compile_model",
    "convert_fp8_linears",
    "fp8_filter",
    "make_optimizer",
    "mark_batch_dynamic",
    "place_model",
    "profiled_phase",
    "prepare_model",
    "repeated_blocks",
    "to_device",
]

_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
ALLOC_CONF_VAR = "PYTORCH_CUDA_ALLOC_CONF"
# The names of an output head (a model's own child): Hugging Face's, torchtitan's, ours.
FP8_HEAD_NAMES = ("lm_head", "head", "output", "classifier", "score")


def allocator_conf(config: TrainConfig, current: str | None) -> str | None:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` a run of ``config`` needs, given the one it has
    (``current``): the items its knobs set (the registry's ``env`` entries for this
    variable: ``expandable_segments:True``) added, any other setting of them replaced;
    otherwise ``current`` as it is."""
    env = {} if current is None else {ALLOC_CONF_VAR: current}
    return environment(config, env).get(ALLOC_CONF_VAR, current)


def apply_allocator_settings(config: TrainConfig) -> None:
    """Set this process's environment up for ``config``: each variable its knobs set that
    is read when CUDA starts (the allocator's expandable segments); call it before CUDA
    starts.

    Where a GPU is present the allocator's items are also passed to this process's
    allocator directly: torch may have read the variable already (when it was imported,
    or when CUDA started); they apply to the segments reserved from then on."""
    wanted = environment(config, os.environ, read="CUDA starts")
    changed = {var: v for var, v in wanted.items() if v != os.environ.get(var)}
    os.environ.update(changed)
    items = [
        setting.value
        for k, setting in env_settings(type(config))
        if setting.var == ALLOC_CONF_VAR and getattr(config, k.name)
    ]
    if ALLOC_CONF_VAR in changed and items and torch.cuda.is_available():  # no CUDA start
        torch.cuda.memory._set_allocator_settings(",".join(items))


def apply_backend_flags(config: TrainConfig, device: torch.device) -> None:
    """Process-wide numerics flags the config's knobs decide (the registry's ``backend``
    entries: TF32 matmuls, cuDNN autotuning), in field order."""
    for flag, setting in backend_settings(config, cuda=device.type == "cuda"):
        owner_path, _, attribute = flag.target.rpartition(".")
        owner: Any = torch
        for part in owner_path.split(".") if owner_path else ():
            owner = getattr(owner, part)
        if flag.call:
            getattr(owner, attribute)(setting)
        else:
            setattr(owner, attribute, setting)


def autocast_context(
    config: TrainConfig, device: torch.device
) -> contextlib.AbstractContextManager[Any]:
    dtype = _AUTOCAST_DTYPES.get(config.precision)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def prepare_model(spec: ModelSpec, config: TrainConfig, device: torch.device) -> nn.Module:
    """Build the model with the config's checkpointing and knobs, on ``device`` (its 4-D
    weights channels-last where the config says)."""
    model = spec.build(activation_checkpointing=config.activation_checkpointing, knobs=config.knobs)
    return place_model(model, config, device)


def place_model(model: nn.Module, config: TrainConfig, device: torch.device) -> nn.Module:
    """``model`` on ``device``, channels-last where the config says (the step lays its
    inputs out to match: ``channels_last_batch``), its linear layers in float8 where it
    says (``convert_fp8_linears``: before the wrapping and the compile)."""
    model = model.to(device)
    if config.channels_last:  # torch's stubs lack the keyword that Module.to takes
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    if config.fp8_linears:
        model = convert_fp8_linears(model)
    return model


def fp8_filter(model: nn.Module) -> Callable[[nn.Module, str], bool]:
    """Which layers of ``model`` go to float8 (torchao's ``module_filter_fn``, called with
    a module and its qualified name): an ``nn.Linear`` whose two sizes are multiples of 16
    (what FP8 tensor cores take), but not the output head: a layer under a child of the
    model named as heads are (``FP8_HEAD_NAMES``), or one whose weight is an embedding's
    (a tied head). The logits stay in the config's precision."""
    tied = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}

    def converted(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear):
            return False
        if module.in_features % 16 or module.out_features % 16:
            return False
        return fqn.split(".")[0] not in FP8_HEAD_NAMES and id(module.weight) not in tied

    return converted


def convert_fp8_linears(model: nn.Module) -> nn.Module:
    """``model`` with the linear layers ``fp8_filter`` picks swapped for torchao's float8
    ones (in place; the state dict keeps its names). A ``ConfigError`` where torchao does
    not import or where no layer qualifies (the knob would change nothing)."""
    keep = fp8_filter(model)
    if not any(keep(module, name) for name, module in model.named_modules()):
        raise ConfigError(
            [
                "config.fp8_linears: the model has no linear layer to run in float8 (an "
                "nn.Linear whose sizes are multiples of 16, other than the output head); "
                "set fp8_linears: false"
            ]
        )
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError:
        raise ConfigError([f"config.fp8_linears: {torchao_problem()}"]) from None
    converted: nn.Module = convert_to_float8_training(model, module_filter_fn=keep)
    return converted


def channels_last_batch(batch: Batch) -> Batch:
    """The batch with its 4-D floating-point tensors (NCHW images) in channels-last layout;
    other tensors (labels, token ids) as they are."""
    return {
        k: v.contiguous(memory_format=torch.channels_last)
        if v.dim() == 4 and v.is_floating_point()
        else v
        for k, v in batch.items()
    }


def mark_batch_dynamic(batch: Batch) -> None:
    """Tell torch.compile that the batch's first dimension varies: the code it compiles
    then serves any micro-batch (above 1: torch specializes a dimension of size 1), and
    the compile cache serves the next micro-batch's process. A hint, not an order
    (``maybe_mark_dynamic``): a model whose code depends on the batch size is still
    compiled for its size."""
    for value in batch.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            torch._dynamo.maybe_mark_dynamic(value, 0)


def compile_model(model: nn.Module, config: TrainConfig) -> nn.Module:
    """``model`` compiled as the config says: off, the whole model, or with
    ``compile_regions`` each repeated block in place (the model itself is returned)."""
    if config.compile == "off":
        return model
    mode = None if config.compile == "default" else config.compile
    keep_precompiled_headers()
    if any(p.device.type == "cpu" for p in model.parameters()):
        trust_vector_isa_check()  # CPU kernels: Inductor checks the CPU's vector ISAs
    if config.compile_regions:
        for block in repeated_blocks(model):
            block.compile(mode=mode)
        return model
    compiled: nn.Module = torch.compile(model, mode=mode)  # type: ignore[assignment]
    return compiled


def repeated_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: the ``nn.ModuleList`` of two or more modules of one
    class holding the most parameters (a transformer's layers). torch.compile compiles
    one block's code once and reuses it for the others; a ConfigError where there is none."""
    lists: list[nn.ModuleList] = [
        m
        for m in model.modules()
        if isinstance(m, nn.ModuleList) and len(m) > 1 and len({type(b) for b in m}) == 1
    ]
    if not lists:
        raise ConfigError(
            [
                "config.compile_regions: the model has no repeated blocks to compile one by one "
                "(an nn.ModuleList of two or more modules of one class, such as its layers); "
                "compile the whole model instead (compile_regions: false)"
            ]
        )
    sizes = [_parameter_count(m) for m in lists]
    return list(lists[sizes.index(max(sizes))])


def _parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def make_optimizer(
    model: nn.Module,
    config: TrainConfig,
    *,
    lr: float = 3e-4,
    weight_decay: float = 0.1,
    betas: tuple[float, float] = (0.9, 0.95),
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not biases, norms or gains)."""
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    kwargs: dict[str, Any] = {"lr": lr, "betas": betas}
    if config.fused_optimizer:
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, **kwargs)


def to_device(batch: Batch, device: torch.device, *, non_blocking: bool = False) -> Batch:
    return {k: v.to(device, non_blocking=non_blocking) for k, v in batch.items()}


@dataclass(frozen=True)
class StepOutput:
    loss: torch.Tensor  # mean loss over the micro-batches, detached, on the device
    grad_norm: torch.Tensor | None  # before clipping; None when clipping is off

    def loss_value(self) -> float:
        return float(self.loss.item())


@contextlib.contextmanager
def _gradient_sync_off(set_sync: Callable[[bool], None]) -> Iterator[None]:
    set_sync(False)
    try:
        yield
    finally:
        set_sync(True)


_NO_RANGE = contextlib.nullcontext()


@contextlib.contextmanager
def profiled_phase(name: str, device: torch.device) -> Iterator[None]:
    """A ``record_function`` range that waits for the device's work before it closes, so
    its length is the phase's (a profiling burst's only: it serializes the device)."""
    with torch.profiler.record_function(f"autotune.{name}"):
        yield
        if device.type == "cuda":
            torch.cuda.synchronize(device)


class Stepper:
    """Runs one optimizer step over ``config.grad_accum`` micro-batches."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        config: TrainConfig,
        device: torch.device,
        loss_fn: Callable[[nn.Module, Batch], torch.Tensor],
        grad_clip: float | None = 1.0,
        scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.device = device
        self.loss_fn = loss_fn
        self.grad_clip = grad_clip
        self.scheduler = scheduler
        self.scaler = torch.amp.GradScaler(device.type, enabled=config.precision == "fp16")
        # compiled code for any micro-batch (``TrainConfig.any_micro_batch``): the trials
        # of a search, its race and the training run all run that code
        self.any_micro_batch = config.any_micro_batch(device.type)
        # Set by a profiling burst (autotune.explain.breakdown): the step's phases become
        # profiler ranges, each drained of device work before it closes.
        self.profile = False

    def _phase(self, name: str) -> contextlib.AbstractContextManager[Any]:
        """The profiler range ``autotune.<name>`` while profiling; else no range at all."""
        if not self.profile:
            return _NO_RANGE
        return profiled_phase(name, self.device)

    def _no_sync(self, last: bool) -> contextlib.AbstractContextManager[Any]:
        """No gradient reduction before the last micro-batch: DDP's ``no_sync`` (not with
        ``static_graph``), FSDP2's ``set_requires_gradient_sync(False)``."""
        if last:
            return contextlib.nullcontext()
        no_sync = getattr(self.model, "no_sync", None)  # DistributedDataParallel
        if getattr(self.model, "static_graph", False):
            # DDP's static graph asserts under no_sync (torch 2.13): it reduces every
            # micro-batch instead, a cost its measurement includes.
            return contextlib.nullcontext()
        if no_sync is not None:
            ctx: contextlib.AbstractContextManager[Any] = no_sync()
            return ctx
        set_sync = getattr(self.model, "set_requires_gradient_sync", None)  # fully_shard
        if set_sync is not None:
            return _gradient_sync_off(set_sync)
        return contextlib.nullcontext()

    def step(
        self,
        micro_batches: Sequence[Batch],
        *,
        after_micro_batch: Callable[[int], None] | None = None,
    ) -> StepOutput:
        """One optimizer step over ``micro_batches``; ``after_micro_batch(i)`` runs once
        micro-batch ``i``'s backward has been queued (a burst times them on the CPU)."""
        if not micro_batches:
            raise ValueError("a step needs at least one micro-batch")
        n = len(micro_batches)
        if self.config.channels_last:
            micro_batches = [channels_last_batch(batch) for batch in micro_batches]
        if self.any_micro_batch:
            for batch in micro_batches:
                mark_batch_dynamic(batch)
        total = torch.zeros((), device=self.device)
        for i, batch in enumerate(micro_batches):
            with self._no_sync(last=i == n - 1):
                with self._phase("forward"), autocast_context(self.config, self.device):
                    loss = self.loss_fn(self.model, batch)
                with self._phase("backward"):
                    self.scaler.scale(loss / n).backward()
            total += loss.detach().float()
            if after_micro_batch is not None:
                after_micro_batch(i)
        with self._phase("optimizer"):
            grad_norm = None
            if self.grad_clip is not None:
                self.scaler.unscale_(self.optimizer)
                grad_norm = nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
            self.scaler.step(self.optimizer)
            self.scaler.update()
            self.optimizer.zero_grad(set_to_none=True)
            if self.scheduler is not None:
                self.scheduler.step()
        return StepOutput(loss=total / n, grad_norm=grad_norm)

    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The state ``state_dict`` gave. A step that ran without the fp16 GradScaler
        (fp32, bf16) saved none: an fp16 step continuing from it starts a fresh scale."""
        if state["scaler"] or not self.scaler.is_enabled():
            self.scaler.load_state_dict(state["scaler"])
