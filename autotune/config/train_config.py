"""The training config: every knob a search may turn, validated in one place.

``TrainConfig`` checks each field on its own (types, ranges, allowed values) in
``__post_init__``; ``check_config`` checks it against a model, a device and this machine
(fp16 only on CUDA, tf32 only where the GPU has it, knobs the model really has, at most
``WORKERS_PER_CORE`` DataLoader workers per usable core). Both report every
problem at once, each with its path (``config.precision: expected one of ...; got 'fp8'``).
``TrainingDefaults`` holds the optimisation settings of a full run (a preset's ``training``
section); ``apply_overrides`` applies ``--set section.field=value`` to both.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from autotune.config.parallel import ParallelConfig
from autotune.config.parallel import coerce as coerce_parallel
from autotune.config.parallel import config_problems as parallel_device_problems
from autotune.core.errors import ConfigError, PresetError
from autotune.core.schema import (
    Rule,
    Section,
    below_one,
    did_you_mean,
    fraction,
    key_problems,
    non_negative,
    positive,
)

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.machine.caps import DeviceCaps

__all__ = [
    "COMPILE_MODES",
    "MAX_NUM_WORKERS",
    "PRECISIONS",
    "WORKERS_PER_CORE",
    "TrainConfig",
    "TrainingDefaults",
    "apply_overrides",
    "check_config",
    "did_you_mean",
    "usable_cores",
    "worker_limit",
]

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
# "reduce-overhead" (CUDA graphs), "max-autotune" (Triton autotuning and CUDA graphs) and
# "max-autotune-no-cudagraphs" are searched on CUDA only.
COMPILE_MODES = ("off", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

# DataLoader workers are processes, each a copy of the dataset's state. A worker mostly
# waits on I/O or decodes, so a few per core can still help; beyond WORKERS_PER_CORE per
# usable core they only contend for the CPU and memory (a typo such as 100000 forks until
# the machine stalls). ``check_config`` applies that machine's limit; MAX_NUM_WORKERS is
# the absolute cap a config (a preset file) may carry on any machine.
WORKERS_PER_CORE = 4
MAX_NUM_WORKERS = 1024


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
    channels_last: bool = False  # model and 4-D inputs in NHWC (convolutional models)
    expandable_segments: bool = False  # PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    # OMP_WAIT_POLICY=ACTIVE: torch's OpenMP threads spin between parallel regions instead
    # of sleeping (CPU only; set before torch starts: autotune/machine/omp.py)
    omp_spin: bool = False
    knobs: Mapping[str, Any] = field(default_factory=dict)
    # Several processes (torchrun): their count and the DDP/FSDP knobs (config/parallel.py).
    parallel: ParallelConfig | None = None

    def __post_init__(self) -> None:
        problems = _field_problems(self, path="config")
        parallel, parallel_issues = coerce_parallel(self.parallel)
        problems += parallel_issues
        if problems:
            raise ConfigError(problems)
        object.__setattr__(self, "knobs", dict(self.knobs))
        object.__setattr__(self, "parallel", parallel)

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step on one process (times the world size under DDP)."""
        return self.micro_batch * self.grad_accum

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["knobs"] = dict(self.knobs)
        if self.parallel is None:  # a single process: the record is as it always was
            del data["parallel"]
        return data

    @classmethod
    def from_mapping(cls, data: Any, *, path: str = "config") -> TrainConfig:
        """Build from plain data (YAML/JSON), reporting every bad field with its path."""
        if not isinstance(data, Mapping):
            raise ConfigError([f"{path}: expected a mapping, got {type(data).__name__}"])
        problems = key_problems(cls, data, path)
        if problems:
            raise ConfigError(problems)
        try:
            return cls(**data)
        except ConfigError as exc:
            raise ConfigError([p.replace("config", path, 1) for p in exc.problems]) from None

    def replace(self, **changes: Any) -> TrainConfig:
        return dataclasses.replace(self, **changes)


# -- the optimisation settings of a full run ---------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrainingDefaults(Section):
    """The optimisation settings of the full run (``autotune train`` flags override them)."""

    lr: float = 3e-4
    weight_decay: float = 0.1
    warmup_steps: int = 100
    schedule: Literal["cosine", "constant", "linear"] = "cosine"
    min_lr_ratio: float = 0.1
    grad_clip: float | None = 1.0
    label_smoothing: float = 0.0
    max_steps: int | None = 1000
    epochs: int | None = None
    eval_interval: int = 100
    eval_batches: int = 10
    log_interval: int = 10
    checkpoint_interval: int = 200
    keep_last: int = 3
    seed: int = 0

    _path: ClassVar[str] = "training"
    _error: ClassVar[type[ConfigError]] = PresetError  # a preset's section, wherever it is built
    _record: ClassVar[str] = "preset"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "lr": positive,
        "weight_decay": non_negative,
        "warmup_steps": non_negative,
        "min_lr_ratio": fraction,
        "grad_clip": positive,
        "label_smoothing": below_one,
        "max_steps": positive,
        "epochs": positive,
        "eval_interval": positive,
        "eval_batches": positive,
        "log_interval": positive,
        "checkpoint_interval": positive,
        "keep_last": positive,
        "seed": non_negative,
    }

    @classmethod
    def _prepare(cls, data: Mapping[Any, Any]) -> Mapping[Any, Any]:
        # `epochs: 3` alone means three epochs, not "three epochs or 1000 steps".
        if data.get("epochs") is not None and "max_steps" not in data:
            return {**data, "max_steps": None}
        return data

    def _cross_problems(self) -> list[str]:
        if self.max_steps is None and self.epochs is None:
            return ["training: set max_steps or epochs (or both: whichever ends first)"]
        return []


# -- overrides (--set) ----------------------------------------------------------------------

_FLOAT_TEXT = ("e", "E", ".", "inf", "nan")


def _parse_value(text: str) -> Any:
    """A ``--set`` value: YAML scalars (``4``, ``true``, ``null``, ``bf16``), ``3e-4`` a float."""
    import yaml

    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and any(s in value for s in _FLOAT_TEXT):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def apply_overrides(
    config: TrainConfig, training: TrainingDefaults, overrides: Sequence[str]
) -> tuple[TrainConfig, TrainingDefaults]:
    """Apply ``section.field=value`` overrides (``config.micro_batch=4``,
    ``config.knobs.block_group=2``, ``training.lr=1e-3``); every bad one reported at once."""
    config_data = config.to_dict()
    training_data = dataclasses.asdict(training)
    training_names = list(training_data)
    problems: list[str] = []
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"--set {item!r}: expected KEY=VALUE, e.g. config.micro_batch=4")
            continue
        value = _parse_value(raw.strip())
        section, _, name = key.partition(".")
        if section == "config" and name:
            if name.startswith("knobs."):
                knobs = config_data["knobs"]
                if not isinstance(knobs, Mapping):  # an earlier --set config.knobs=0
                    problems.append(f"--set {key}: config.knobs is {knobs!r}, not a mapping")
                    continue
                config_data["knobs"] = {**knobs, name.removeprefix("knobs."): value}
            elif name.startswith("parallel."):
                parallel = config_data.get("parallel")
                if not isinstance(parallel, Mapping):
                    problems.append(f"--set {key}: this config has no parallel section")
                    continue
                config_data["parallel"] = {**parallel, name.removeprefix("parallel."): value}
            elif "." in name:
                problems.append(f"--set {key}: config.{name.split('.')[0]} has no sub-fields")
            else:
                config_data[name] = value  # unknown names are reported by from_mapping
        elif section == "training" and name:
            if name not in training_names:
                problems.append(
                    f"--set {key}: unknown field{did_you_mean(name, training_names)} (training "
                    f"fields: {', '.join(training_names)})"
                )
            else:
                training_data[name] = value
        else:
            problems.append(
                f"--set {key}: expected config.FIELD, config.knobs.NAME, config.parallel.NAME "
                "or training.FIELD"
            )
    new_config, new_training = config, training
    try:
        new_config = TrainConfig.from_mapping(config_data)
    except ConfigError as exc:
        problems += exc.problems
    try:
        new_training = TrainingDefaults(**training_data)
    except PresetError as exc:
        problems += exc.problems
    if problems:
        raise ConfigError(problems, context="invalid --set override")
    return new_config, new_training


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _field_problems(cfg: TrainConfig, *, path: str) -> list[str]:
    problems: list[str] = []
    for name in ("micro_batch", "grad_accum", "seq_len"):
        value = getattr(cfg, name)
        if not _is_int(value) or value < 1:
            problems.append(f"{path}.{name}: expected a positive integer, got {value!r}")
    if not _is_int(cfg.num_workers) or not 0 <= cfg.num_workers <= MAX_NUM_WORKERS:
        problems.append(
            f"{path}.num_workers: expected an integer from 0 to {MAX_NUM_WORKERS} "
            f"(DataLoader worker processes), got {cfg.num_workers!r}"
        )
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
        "channels_last",
        "expandable_segments",
        "omp_spin",
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


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity (``taskset``, a container's
    cpuset) where the OS tells it, else the machine's count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def worker_limit(cores: int | None = None) -> int:
    """The most DataLoader workers a run may fork here: ``WORKERS_PER_CORE`` per usable core."""
    return WORKERS_PER_CORE * (usable_cores() if cores is None else cores)


def check_config(
    config: TrainConfig, *, spec: ModelSpec, device: DeviceCaps, cores: int | None = None
) -> None:
    """Reject combinations this model, this device or this machine cannot run (``cores``:
    the usable CPU cores, default this process's), all problems at once."""
    problems: list[str] = []
    cores = usable_cores() if cores is None else cores
    if config.num_workers > worker_limit(cores):
        problems.append(
            f"config.num_workers: at most {worker_limit(cores)} on this machine "
            f"({WORKERS_PER_CORE} x {cores} usable cores), got {config.num_workers}"
        )
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
    problems += parallel_device_problems(config, device, cores=cores)
    problems += _switch_problems(config, spec=spec, device=device)
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
        elif (problem := known[name].value_problem(value, device)) is not None:
            problems.append(f"config.knobs.{name}: {problem}")
    if problems:
        raise ConfigError(problems, context=f"config not runnable on {device.device}")


def _switch_problems(config: TrainConfig, *, spec: ModelSpec, device: DeviceCaps) -> list[str]:
    """The on/off settings of one device kind that ``config`` turns on where they cannot run."""
    problems: list[str] = []
    if config.channels_last and not spec.convolutional:
        problems.append(
            f"config.channels_last: model {spec.name!r} is not declared convolutional "
            "(ModelSpec.convolutional), so it has no NCHW images to lay out channels-last"
        )
    if config.expandable_segments and device.kind != "cuda":
        problems.append(
            "config.expandable_segments: a setting of the CUDA caching allocator; needs a "
            f"CUDA device, not {device.device}"
        )
    if config.omp_spin and device.kind != "cpu":
        problems.append(
            "config.omp_spin: how torch's OpenMP threads wait between CPU operations; "
            f"searched and set for a CPU device only, not {device.device}"
        )
    return problems
