"""The training config: every knob a search may turn, validated in one place.

``TrainConfig`` checks each field on its own (types, ranges, allowed values) in
``__post_init__``; ``check_config`` checks it against a model and a device (fp16 only on
CUDA, tf32 only where the GPU has it, knobs the model really has). Both report every
problem at once, each with its path (``config.precision: expected one of ...; got 'fp8'``).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from autotune.errors import ConfigError

if TYPE_CHECKING:
    from autotune.hardware import DeviceCaps
    from autotune.models.spec import ModelSpec

__all__ = [
    "COMPILE_MODES",
    "PRECISIONS",
    "TrainConfig",
    "check_config",
    "did_you_mean",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune")


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """One point of the search space: how a training step is run."""

    micro_batch: int
    grad_accum: int = 1
    seq_len: int
    precision: str = "fp32"
    activation_checkpointing: bool = False
    compile: str = "off"
    num_workers: int = 0
    pin_memory: bool = False
    prefetch_factor: int | None = None  # only with num_workers > 0 (torch's default: 2)
    persistent_workers: bool = False
    fused_optimizer: bool = False
    cudnn_benchmark: bool = False
    knobs: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = _field_problems(self, path="config")
        if problems:
            raise ConfigError(problems)
        object.__setattr__(self, "knobs", dict(self.knobs))

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step on one process (times the world size under DDP)."""
        return self.micro_batch * self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["knobs"] = dict(self.knobs)
        return data

    @classmethod
    def from_mapping(cls, data: Any, *, path: str = "config") -> TrainConfig:
        """Build from plain data (YAML/JSON), reporting every bad field with its path."""
        if not isinstance(data, Mapping):
            raise ConfigError([f"{path}: expected a mapping, got {type(data).__name__}"])
        names = [f.name for f in dataclasses.fields(cls)]
        problems = [
            f"{path}.{key}: unknown field{did_you_mean(str(key), names)}"
            for key in data
            if key not in names
        ]
        required = [
            f.name
            for f in dataclasses.fields(cls)
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        problems += [
            f"{path}.{name}: missing required field" for name in required if name not in data
        ]
        if problems:
            raise ConfigError(problems)
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except ConfigError as exc:
            raise ConfigError([p.replace("config", path, 1) for p in exc.problems]) from None

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_problems(cfg: TrainConfig, *, path: str) -> list[str]:
    problems: list[str] = []
    for name in ("micro_batch", "grad_accum", "seq_len"):
        value = getattr(cfg, name)
        if not _is_int(value) or value < 1:
            problems.append(f"{path}.{name}: expected a positive integer, got {value!r}")
    if not _is_int(cfg.num_workers) or cfg.num_workers < 0:
        problems.append(f"{path}.num_workers: expected an integer >= 0, got {cfg.num_workers!r}")
    if cfg.precision not in PRECISIONS:
        problems.append(
            f"{path}.precision: expected one of {', '.join(PRECISIONS)}; got {cfg.precision!r}"
        )
    if cfg.compile not in COMPILE_MODES:
        problems.append(
            f"{path}.compile: expected one of {', '.join(COMPILE_MODES)}; got {cfg.compile!r}"
        )
    for name in (
        "activation_checkpointing",
        "pin_memory",
        "persistent_workers",
        "fused_optimizer",
        "cudnn_benchmark",
    ):
        value = getattr(cfg, name)
        if not isinstance(value, bool):
            problems.append(f"{path}.{name}: expected true or false, got {value!r}")
    if cfg.prefetch_factor is not None:
        if not _is_int(cfg.prefetch_factor) or cfg.prefetch_factor < 1:
            problems.append(
                f"{path}.prefetch_factor: expected a positive integer or null, "
                f"got {cfg.prefetch_factor!r}"
            )
        elif _is_int(cfg.num_workers) and cfg.num_workers == 0:
            problems.append(f"{path}.prefetch_factor: only allowed with num_workers > 0")
    if cfg.persistent_workers is True and cfg.num_workers == 0:
        problems.append(f"{path}.persistent_workers: only allowed with num_workers > 0")
    if not isinstance(cfg.knobs, Mapping):
        problems.append(f"{path}.knobs: expected a mapping, got {type(cfg.knobs).__name__}")
    return problems


def check_config(config: TrainConfig, *, spec: ModelSpec, device: DeviceCaps) -> None:
    """Reject combinations this model or this device cannot run, all problems at once."""
    problems: list[str] = []
    if config.seq_len > spec.max_seq_len:
        problems.append(
            f"config.seq_len: model {spec.name!r} accepts at most {spec.max_seq_len}, "
            f"got {config.seq_len}"
        )
    precision_problem = device.precision_problem(config.precision)
    if precision_problem is not None:
        problems.append(f"config.precision: {precision_problem}")
    if config.activation_checkpointing and not spec.supports_checkpointing:
        problems.append(f"config.activation_checkpointing: model {spec.name!r} does not support it")
    if config.compile != "off" and not device.compile:
        problems.append(f"config.compile: torch.compile cannot run on {device.device} here")
    if config.pin_memory and device.kind != "cuda":
        problems.append("config.pin_memory: only useful with a CUDA device")
    if config.cudnn_benchmark and device.kind != "cuda":
        problems.append("config.cudnn_benchmark: only available on a CUDA device")
    known = {k.name: k for k in spec.knobs}
    for name, value in config.knobs.items():
        if name not in known:
            names = ", ".join(known) or "none"
            problems.append(
                f"config.knobs.{name}: model {spec.name!r} has no such knob "
                f"(its knobs: {names}){did_you_mean(name, list(known))}"
            )
        elif value not in known[name].values:
            allowed = ", ".join(map(str, known[name].values))
            problems.append(f"config.knobs.{name}: expected one of {allowed}; got {value!r}")
    if problems:
        raise ConfigError(problems, context=f"config not runnable on {device.device}")
