"""Presets: the versioned, validated, portable YAML record of a tuned config (DESIGN principle 6).

A preset says what it is (model, task, config, budget), where it was measured (the hardware
``fingerprint``), what was measured there (``measured``, with the naive ``baseline`` beside
it), how it was found (``search``) and how to train with it (``training``). The field
reference is docs/preset-format.md.

``preset_from_dict`` is the one boundary between YAML and the typed objects: it reports
every problem at once, each with its path (``config.precision: expected one of fp32, tf32,
bf16, fp16; got 'fp8'``), migrates older schema versions and refuses newer ones.
``load_preset`` reads files with ``yaml.safe_load`` only; ``save_preset`` writes atomically.
``check_portability`` compares a preset's fingerprint with this machine and refuses what the
device cannot run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import errno
import math
import os
import re
import reprlib
import tempfile
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from autotune.config import TrainConfig, did_you_mean
from autotune.errors import BudgetError, ConfigError, HardwareMismatchError, PresetError
from autotune.units import format_bytes, parse_budget

if TYPE_CHECKING:
    from autotune.burst import BurstResult
    from autotune.hardware import GPUInfo, HardwareProfile
    from autotune.models.spec import ModelSpec

__all__ = [
    "PRESET_SCHEMA_VERSION",
    "Baseline",
    "Fingerprint",
    "Measured",
    "ModelRef",
    "PortabilityReport",
    "Preset",
    "SearchSummary",
    "Task",
    "TrainingDefaults",
    "atomic_write_text",
    "builtin_preset_dir",
    "default_device_for",
    "check_portability",
    "dump_preset",
    "find_presets",
    "load_preset",
    "preset_from_dict",
    "preset_to_dict",
    "preset_ref",
    "resolve_preset",
    "save_preset",
    "user_preset_dir",
    "utc_now",
]

PRESET_SCHEMA_VERSION = 2
_OLDEST_SCHEMA_VERSION = 1
_MAX_FILE_BYTES = 10 * 2**20  # a preset is a few KB; anything this large is not one
_MAX_NESTING = 32  # how deep model args may nest
_MAX_NODES = 10_000  # how many values model args may hold


def utc_now() -> str:
    """The current time as an ISO 8601 UTC timestamp, e.g. ``2024-05-01T12:00:00Z``."""
    return (
        _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


# --------------------------------------------------------------------------------------
# Field validation shared by every section: types from the annotations, ranges from rules.
# --------------------------------------------------------------------------------------

_BAD = object()  # marks a value that failed validation (its problem is already recorded)
_FLOAT_TEXT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")
Rule = Callable[[Any], "str | None"]


def _make_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxtuple, short.maxset = 2, 4, 4, 4, 4
    short.maxstring, short.maxother, short.maxlong = 50, 50, 40
    return short


_REPR = _make_repr()


def _show(value: Any) -> str:
    """A short repr of a bad value for an error message (bounded, even for a YAML "billion
    laughs" structure of nested aliases)."""
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _key(key: Any) -> str:
    """A mapping key as it reads in a path."""
    text = str(key) if isinstance(key, (str, int, float, bool)) or key is None else _show(key)
    return text if len(text) <= 40 else text[:37] + "..."


def _type_name(value: Any) -> str:
    return {
        type(None): "null",
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def _describe(tp: Any) -> str:
    """How a type reads in an error message."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [_describe(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin is dict:
        return "a mapping"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, "a mapping"
    )


def _plain_data_problem(value: Any) -> str | None:
    """Why ``value`` is not plain YAML data (scalars, lists, string-keyed mappings) of a
    sane size, or None where it is."""
    budget = [_MAX_NODES]

    def walk(item: Any, depth: int) -> str | None:
        budget[0] -= 1
        if budget[0] < 0:
            return f"more than {_MAX_NODES} values (YAML aliases nested too deep?)"
        if depth > _MAX_NESTING:
            return f"nested more than {_MAX_NESTING} levels deep"
        if item is None or isinstance(item, (bool, int, str)):
            return None
        if isinstance(item, float):
            return None if math.isfinite(item) else f"not a finite number: {item!r}"
        if isinstance(item, (list, tuple)):
            children = list(item)
        elif isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    return f"keys must be strings, got {_show(key)}"
            children = list(item.values())
        else:
            return f"not plain data (a {type(item).__name__})"
        for child in children:
            problem = walk(child, depth + 1)
            if problem:
                return problem
        return None

    return walk(value, 0)


def _plain_copy(value: Any) -> Any:
    """A deep copy with tuples turned into lists, as YAML would give them back."""
    if isinstance(value, Mapping):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_copy(v) for v in value]
    return value


def _convert(value: Any, tp: Any, path: str, problems: list[str]) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (normalised) or ``_BAD``."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
        inner_problems: list[str] = []
        result = _convert(value, inner, path, inner_problems)
        wrong_type = f"{path}: expected {_describe(inner)}; got "
        if inner_problems and inner_problems[0].startswith(wrong_type):
            inner_problems = [f"{path}: expected {_describe(tp)}; got {_show(value)}"]
        problems.extend(inner_problems)
        return result
    if origin is Literal:
        allowed = typing.get_args(tp)
        if isinstance(value, str) and value in allowed:
            return value
        problems.append(f"{path}: expected {_describe(tp)}; got {_show(value)}")
        return _BAD
    if origin is dict:
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected a mapping; got {_show(value)}")
            return _BAD
        problem = _plain_data_problem(value)
        if problem:
            problems.append(f"{path}: {problem}")
            return _BAD
        return _plain_copy(value)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        number: float | None = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value)
        elif isinstance(value, str) and _FLOAT_TEXT.match(value):
            number = float(value)  # YAML 1.1 reads `3e-4` as a string; accept it as a number
        if number is not None:
            if math.isfinite(number):
                return number
            problems.append(f"{path}: expected a finite number; got {_show(value)}")
            return _BAD
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is TrainConfig:
        return _convert_config(value, path, problems)
    elif isinstance(tp, type) and issubclass(tp, _Section):
        if isinstance(value, tp):
            return value
        return _build(tp, value, path, problems)
    else:  # pragma: no cover - a field type this module does not know
        raise TypeError(f"no validation for {tp!r} at {path}")
    problems.append(f"{path}: expected {_describe(tp)}; got {_show(value)}")
    return _BAD


class _Opaque:
    """Stands in for a list or mapping where TrainConfig expects one value, so that its
    messages (which repr the value in full) stay short."""

    def __init__(self, value: Any) -> None:
        self.text = _show(value)

    def __repr__(self) -> str:
        return self.text


def _convert_config(value: Any, path: str, problems: list[str]) -> Any:
    if isinstance(value, TrainConfig):
        config = value
    else:
        if isinstance(value, Mapping):
            value = {
                k: _Opaque(v)
                if isinstance(v, (list, tuple, set, Mapping))
                and not (k == "knobs" and isinstance(v, Mapping))
                else v
                for k, v in value.items()
            }
        try:
            config = TrainConfig.from_mapping(value, path=path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            return _BAD
    bad = False
    for name, knob in config.knobs.items():
        if not isinstance(name, str):
            problems.append(f"{path}.knobs: keys must be strings, got {_show(name)}")
            bad = True
        elif not (knob is None or isinstance(knob, (bool, int, str, float))) or (
            isinstance(knob, float) and not math.isfinite(knob)
        ):
            problems.append(
                f"{path}.knobs.{name}: expected a string, number, true/false or null; "
                f"got {_show(knob)}"
            )
            bad = True
    return _BAD if bad else config


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a section (cached)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _build(
    cls: type[_S], data: Any, path: str, problems: list[str], *, required: tuple[str, ...] = ()
) -> Any:
    """Build section ``cls`` from plain data, recording every problem under ``path``."""
    if not isinstance(data, Mapping):
        problems.append(f"{path}: expected a mapping; got {_show(data)}")
        return _BAD
    data = cls._prepare(data)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    hints = _hints(cls)
    local: list[str] = []
    for key in data:
        if not isinstance(key, str) or key not in fields:
            where = _join(path, _key(key))
            local.append(f"{where}: unknown field{did_you_mean(_key(key), list(fields))}")
    for name, f in fields.items():
        optional = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        if name not in data and (not optional or name in required):
            local.append(f"{_join(path, name)}: missing required field")
    kwargs: dict[str, Any] = {}
    for name in fields:
        if name in data:
            value = cls._check_field(name, data[name], hints[name], _join(path, name), local)
            if value is not _BAD:
                kwargs[name] = value
    if local:
        problems.extend(local)
        return _BAD
    try:
        return cls(**kwargs)
    except PresetError as exc:
        problems.extend(exc.problems)
        return _BAD


# Range rules: each returns a problem (without the path) or None.
def _positive(value: Any) -> str | None:
    return None if value > 0 else f"expected a number > 0; got {_show(value)}"


def _non_negative(value: Any) -> str | None:
    return None if value >= 0 else f"expected a number >= 0; got {_show(value)}"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else f"expected a number in [0, 1]; got {_show(value)}"


def _below_one(value: float) -> str | None:
    return None if 0 <= value < 1 else f"expected a number in [0, 1); got {_show(value)}"


_CAPABILITY = re.compile(r"^\d+\.\d+$")


def _capability(value: str) -> str | None:
    if _CAPABILITY.match(value):
        return None
    return f"expected a compute capability such as '8.0'; got {_show(value)}"


def _parse_created(value: Any) -> str | None:
    """``value`` (a string, or the datetime YAML made of an unquoted timestamp) as canonical
    ISO 8601 UTC text, or None where it is not a UTC timestamp."""
    when: _dt.datetime
    if isinstance(value, _dt.datetime):
        when = value
    elif isinstance(value, _dt.date):
        when = _dt.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            when = _dt.datetime.fromisoformat(text)
        except ValueError:
            return None
    else:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=_dt.timezone.utc)  # YAML gives naive datetimes in UTC
    elif when.utcoffset() != _dt.timedelta(0):
        return None
    text = when.astimezone(_dt.timezone.utc).isoformat()
    return text.replace("+00:00", "Z")


def _created(value: str) -> str | None:
    if _parse_created(value) is not None:
        return None
    return f"expected an ISO 8601 UTC timestamp such as 2024-05-01T12:00:00Z; got {_show(value)}"


def _current_version(value: int) -> str | None:
    if value == PRESET_SCHEMA_VERSION:
        return None
    return f"a loaded preset is always version {PRESET_SCHEMA_VERSION}; got {value!r}"


class _Section:
    """Validation shared by the preset's dataclasses (checked on every construction)."""

    _path: ClassVar[str] = ""  # where the section sits in a preset ("" for the root)
    _rules: ClassVar[Mapping[str, Rule]] = {}  # field -> range check, run after the type check
    _normalize: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}  # field -> input clean-up

    @classmethod
    def _check_field(cls, name: str, value: Any, tp: Any, path: str, problems: list[str]) -> Any:
        """One field's value, normalised and type- and range-checked, or ``_BAD``."""
        if name in cls._normalize:
            value = cls._normalize[name](value)
        value = _convert(value, tp, path, problems)
        rule = cls._rules.get(name)
        if value is not _BAD and value is not None and rule is not None:
            message = rule(value)
            if message:
                problems.append(f"{path}: {message}")
                return _BAD
        return value

    @classmethod
    def _prepare(cls, data: Mapping[Any, Any]) -> Mapping[Any, Any]:
        """Defaults that depend on other keys of the input (before validation)."""
        return data

    def __post_init__(self) -> None:
        problems: list[str] = []
        hints = _hints(type(self))
        ok = True
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            path = _join(self._path, f.name)
            value = self._check_field(f.name, getattr(self, f.name), hints[f.name], path, problems)
            if value is _BAD:
                ok = False
            else:
                object.__setattr__(self, f.name, value)
        if ok:
            problems += self._cross_problems()
        if problems:
            where = f" {self._path} section" if self._path else ""
            raise PresetError(problems, context=f"invalid preset{where}")

    def _cross_problems(self) -> list[str]:
        """Checks that involve more than one field (run once every field is valid)."""
        return []


_S = typing.TypeVar("_S", bound=_Section)


# --------------------------------------------------------------------------------------
# The sections of a preset
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelRef(_Section):
    """Which model: a built-in name (``mu``) or a user reference (``pkg.mod:spec``,
    ``path/to/file.py:spec``), and overrides of that spec's size arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)

    _path: ClassVar[str] = "model"
    _rules: ClassVar[Mapping[str, Rule]] = {"name": _non_empty}

    def load(self) -> ModelSpec:
        """The spec this reference names, with its size arguments applied
        (``ModelLoadError`` for an unknown model)."""
        from autotune.models.registry import load_model

        spec = load_model(self.name)
        return spec.with_args(**self.args) if self.args else spec


@dataclass(frozen=True, kw_only=True)
class Task(_Section):
    """The training task the config was tuned for."""

    seq_len: int
    global_batch: int  # samples per optimizer step (kept fixed by the search)

    _path: ClassVar[str] = "task"
    _rules: ClassVar[Mapping[str, Rule]] = {"seq_len": _positive, "global_batch": _positive}


@dataclass(frozen=True, kw_only=True)
class Fingerprint(_Section):
    """The hardware and software the figures in ``measured`` were measured on."""

    device_kind: Literal["cpu", "cuda"]
    device_name: str  # the GPU's name, or the CPU model for a CPU preset
    memory_bytes: int  # the GPU's total memory, or the machine's RAM for a CPU preset
    compute_capability: str | None = None  # "8.0"; CUDA only
    driver_version: str | None = None
    cuda_version: str | None = None  # the CUDA version torch was built with; CUDA only
    torch_version: str
    autotune_version: str
    cpu_model: str
    cpu_cores: int

    _path: ClassVar[str] = "fingerprint"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "device_name": _non_empty,
        "memory_bytes": _non_negative,
        "compute_capability": _capability,
        "cpu_cores": _positive,
    }

    @classmethod
    def from_profile(cls, profile: HardwareProfile, device: str) -> Fingerprint:
        """The fingerprint of ``device`` (``cpu``, ``cuda``, ``cuda:N``) on this machine."""
        _, gpu = _find_device(device, profile)
        cpu, software = profile.cpu, profile.software
        if gpu is None:
            return cls(
                device_kind="cpu",
                device_name=cpu.model_name,
                memory_bytes=cpu.total_ram_bytes,
                torch_version=software.torch_version,
                autotune_version=software.autotune_version,
                cpu_model=cpu.model_name,
                cpu_cores=cpu.physical_cores or cpu.logical_cores,
            )
        major, minor = gpu.compute_capability
        return cls(
            device_kind="cuda",
            device_name=gpu.name,
            memory_bytes=gpu.total_memory_bytes,
            compute_capability=f"{major}.{minor}",
            driver_version=gpu.driver_version,
            cuda_version=gpu.cuda_version or software.torch_cuda_version,
            torch_version=software.torch_version,
            autotune_version=software.autotune_version,
            cpu_model=cpu.model_name,
            cpu_cores=cpu.physical_cores or cpu.logical_cores,
        )

    def describe(self) -> str:
        """``NVIDIA A100-SXM4-80GB (cuda, 80.00 GiB)`` or ``Intel Xeon (cpu, 4 cores)``."""
        if self.device_kind == "cuda":
            return f"{self.device_name} (cuda, {format_bytes(self.memory_bytes)})"
        return f"{self.device_name} (cpu, {self.cpu_cores} cores)"


@dataclass(frozen=True, kw_only=True)
class Measured(_Section):
    """What the winning config measured on the fingerprint's hardware (kept verbatim)."""

    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    peak_memory_bytes: int | None = None
    mfu: float | None = None
    compile_s: float | None = None

    _path: ClassVar[str] = "measured"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "tokens_per_s": _non_negative,
        "samples_per_s": _non_negative,
        "step_time_median_s": _non_negative,
        "step_time_p90_s": _non_negative,
        "peak_memory_bytes": _non_negative,
        "mfu": _non_negative,
        "compile_s": _non_negative,
    }

    @classmethod
    def from_burst(cls, result: BurstResult) -> Measured:
        return cls(
            tokens_per_s=result.tokens_per_s,
            samples_per_s=result.samples_per_s,
            step_time_median_s=result.step_time_median_s,
            step_time_p90_s=result.step_time_p90_s,
            peak_memory_bytes=result.peak_memory_bytes,
            mfu=result.mfu,
            compile_s=result.compile_s,
        )

    @property
    def throughput(self) -> tuple[float, str] | None:
        """The headline figure: ``(value, "tokens/s")``, else samples/s, else None."""
        if self.tokens_per_s is not None:
            return self.tokens_per_s, "tokens/s"
        if self.samples_per_s is not None:
            return self.samples_per_s, "samples/s"
        return None


@dataclass(frozen=True, kw_only=True)
class Baseline(_Section):
    """The naive config, measured in the same study, and the preset's speedup over it."""

    config: TrainConfig
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None  # measured throughput / baseline throughput

    _path: ClassVar[str] = "baseline"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "tokens_per_s": _non_negative,
        "samples_per_s": _non_negative,
        "speedup": _non_negative,
    }


@dataclass(frozen=True, kw_only=True)
class SearchSummary(_Section):
    """How the config was found."""

    trials_run: int
    infeasible: int = 0
    pruned: int = 0
    failed: int = 0
    wall_s: float
    study_name: str
    storage: str
    objective: str = "throughput"
    sampler: str = "tpe"

    _path: ClassVar[str] = "search"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "trials_run": _non_negative,
        "infeasible": _non_negative,
        "pruned": _non_negative,
        "failed": _non_negative,
        "wall_s": _non_negative,
    }


@dataclass(frozen=True, kw_only=True)
class TrainingDefaults(_Section):
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
    _rules: ClassVar[Mapping[str, Rule]] = {
        "lr": _positive,
        "weight_decay": _non_negative,
        "warmup_steps": _non_negative,
        "min_lr_ratio": _fraction,
        "grad_clip": _positive,
        "label_smoothing": _below_one,
        "max_steps": _positive,
        "epochs": _positive,
        "eval_interval": _positive,
        "eval_batches": _positive,
        "log_interval": _positive,
        "checkpoint_interval": _positive,
        "keep_last": _positive,
        "seed": _non_negative,
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


@dataclass(frozen=True, kw_only=True)
class Preset(_Section):
    """A tuned config and everything needed to trust, reuse and re-check it."""

    # The order of the YAML file (and of error messages).
    schema_version: int = PRESET_SCHEMA_VERSION
    name: str
    created: str = field(default_factory=utc_now)  # ISO 8601 UTC
    model: ModelRef
    task: Task
    budget_bytes: int | None = None  # the memory budget of the search; None = the device's
    config: TrainConfig
    measured: Measured
    baseline: Baseline | None = None
    search: SearchSummary | None = None
    fingerprint: Fingerprint
    training: TrainingDefaults = field(default_factory=TrainingDefaults)
    notes: str = ""

    _path: ClassVar[str] = ""
    _rules: ClassVar[Mapping[str, Rule]] = {
        "schema_version": _current_version,
        "name": _non_empty,
        "budget_bytes": _positive,
        "created": _created,
    }
    # YAML turns an unquoted timestamp into a datetime: take it, as canonical UTC text.
    _normalize: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "created": lambda value: _parse_created(value) or value
    }

    @property
    def throughput(self) -> tuple[float, str] | None:
        return self.measured.throughput

    def replace(self, **changes: Any) -> Preset:
        return dataclasses.replace(self, **changes)


# --------------------------------------------------------------------------------------
# Plain data <-> Preset
# --------------------------------------------------------------------------------------


def _section_dict(section: _Section) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        value = getattr(section, f.name)
        if isinstance(value, TrainConfig):
            value = _config_dict(value)
        elif isinstance(value, _Section):
            value = _section_dict(value)
        else:
            value = _plain_copy(value)
        out[f.name] = value
    return out


def _config_dict(config: TrainConfig) -> dict[str, Any]:
    return _plain_copy(config.to_dict())


def preset_to_dict(preset: Preset) -> dict[str, Any]:
    """Plain, YAML-able data in a stable key order (the order of docs/preset-format.md)."""
    return {
        "schema_version": preset.schema_version,
        "name": preset.name,
        "created": preset.created,
        "model": _section_dict(preset.model),
        "task": _section_dict(preset.task),
        "budget_bytes": preset.budget_bytes,
        "config": _config_dict(preset.config),
        "measured": _section_dict(preset.measured),
        "baseline": None if preset.baseline is None else _section_dict(preset.baseline),
        "search": None if preset.search is None else _section_dict(preset.search),
        "fingerprint": _section_dict(preset.fingerprint),
        "training": _section_dict(preset.training),
        "notes": preset.notes,
    }


def _fail(message: str) -> PresetError:
    return PresetError([], context=message)


def preset_from_dict(data: Any, *, source: str = "<preset>") -> Preset:
    """Validate plain data (from YAML or JSON) into a ``Preset``.

    Every problem is reported at once with its path; an older schema version is migrated,
    a newer or unknown one refused. Raises ``PresetError`` (exit code 2).
    """
    if not isinstance(data, Mapping):
        raise _fail(
            f"{source} is not an autotune preset: expected a mapping of fields at the top "
            f"level, got {_type_name(data)}"
        )
    if "schema_version" not in data:
        raise PresetError(
            [
                f"schema_version: missing (every preset starts with schema_version: "
                f"{PRESET_SCHEMA_VERSION})"
            ],
            context=f"{source} is not a valid autotune preset",
        )
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise PresetError(
            [f"schema_version: expected an integer; got {_show(version)}"],
            context=f"invalid preset {source}",
        )
    if version > PRESET_SCHEMA_VERSION:
        raise _fail(
            f"{source} has preset schema version {version}, newer than this autotune reads "
            f"(versions {_OLDEST_SCHEMA_VERSION} to {PRESET_SCHEMA_VERSION}); upgrade "
            "autotune (pip install -U autotune) to use it"
        )
    if version < _OLDEST_SCHEMA_VERSION:
        raise _fail(
            f"{source} has unknown preset schema version {version}; this autotune reads "
            f"versions {_OLDEST_SCHEMA_VERSION} to {PRESET_SCHEMA_VERSION}"
        )
    problems: list[str] = []
    if version == 1:
        migrated = _migrate_v1(data, problems)
        later: list[str] = []
        preset = _build(Preset, migrated, "", later, required=("created",))
        problems += [_v1_path(p) for p in later]  # in the names the file uses
        if problems or not isinstance(preset, Preset):
            unique = list(dict.fromkeys(problems))
            raise PresetError(unique, context=f"invalid preset {source} (schema version 1)")
        return preset
    preset = _build(Preset, data, "", problems, required=("created",))
    if problems or not isinstance(preset, Preset):
        raise PresetError(problems, context=f"invalid preset {source}")
    return preset


# --------------------------------------------------------------------------------------
# Schema version 1 (autotune 0.0.x): flatter, `budget` as text, `hardware` for the
# fingerprint, no `training` section. Migrated on load; never written.
# --------------------------------------------------------------------------------------

_V1_TOP = (
    "schema_version",
    "name",
    "created",
    "model",
    "model_args",
    "seq_len",
    "global_batch",
    "budget",
    "config",
    "hardware",
    "measured",
    "baseline",
    "search",
    "notes",
)
_V1_HARDWARE = {  # v1 name -> v2 fingerprint name
    "device": "device_kind",
    "name": "device_name",
    "memory_bytes": "memory_bytes",
    "compute_capability": "compute_capability",
    "driver": "driver_version",
    "cuda": "cuda_version",
    "torch": "torch_version",
    "autotune": "autotune_version",
    "cpu": "cpu_model",
    "cores": "cpu_cores",
}
_V1_MEASURED = {
    "tokens_per_s": "tokens_per_s",
    "samples_per_s": "samples_per_s",
    "step_time_s": "step_time_median_s",
    "step_time_p90_s": "step_time_p90_s",
    "peak_memory_bytes": "peak_memory_bytes",
    "mfu": "mfu",
    "compile_s": "compile_s",
}
_V1_SEARCH = {
    "trials": "trials_run",
    "infeasible": "infeasible",
    "pruned": "pruned",
    "failed": "failed",
    "wall_s": "wall_s",
    "study": "study_name",
    "storage": "storage",
}
# v2 path prefix -> v1 path, to report problems in the names the file uses
_V2_TO_V1 = (
    [("model.name", "model"), ("model.args", "model_args")]
    + [("task.seq_len", "seq_len"), ("task.global_batch", "global_batch")]
    + [("budget_bytes", "budget")]
    + [(f"fingerprint.{v2}", f"hardware.{v1}") for v1, v2 in _V1_HARDWARE.items()]
    + [("fingerprint", "hardware")]
    + [(f"measured.{v2}", f"measured.{v1}") for v1, v2 in _V1_MEASURED.items()]
    + [(f"search.{v2}", f"search.{v1}") for v1, v2 in _V1_SEARCH.items()]
)
_V1_DEVICE = re.compile(r"^(cpu|cuda)(:\d+)?$")


def _v1_path(problem: str) -> str:
    for new, old in _V2_TO_V1:
        if problem == new or problem.startswith((f"{new}:", f"{new}.")):
            return old + problem[len(new) :]
    return problem


def _rename(
    section: Any, mapping: Mapping[str, str], path: str, problems: list[str]
) -> dict[str, Any] | Any:
    """Rename a v1 section's keys to v2 names; unknown keys are problems (v1 names)."""
    if not isinstance(section, Mapping):
        return section  # the v2 validation reports the type (under the v1 path)
    out: dict[str, Any] = {}
    for key, value in section.items():
        if key in mapping:
            out[mapping[key]] = value
        else:
            problems.append(
                f"{path}.{_key(key)}: unknown field{did_you_mean(_key(key), list(mapping))}"
            )
    return out


def _migrate_v1(data: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """Turn a version 1 preset into version 2 data (validated afterwards as version 2)."""
    for key in data:
        if key not in _V1_TOP:
            problems.append(f"{_key(key)}: unknown field{did_you_mean(_key(key), list(_V1_TOP))}")
    out: dict[str, Any] = {"schema_version": PRESET_SCHEMA_VERSION}
    for key in ("name", "created", "config", "notes"):
        if key in data:
            out[key] = data[key]
    model: dict[str, Any] = {}
    if "model" in data:
        model["name"] = data["model"]
    if "model_args" in data:
        model["args"] = data["model_args"]
    out["model"] = model
    out["task"] = {k: data[k] for k in ("seq_len", "global_batch") if k in data}

    hardware = _rename(data.get("hardware"), _V1_HARDWARE, "hardware", problems)
    if isinstance(hardware, dict):  # v1 named the device ("cuda:1"); v2 keeps its kind
        device = hardware.get("device_kind")
        if isinstance(device, str) and _V1_DEVICE.match(device):
            hardware["device_kind"] = device.partition(":")[0]
    if "hardware" in data:
        out["fingerprint"] = hardware

    budget = data.get("budget")
    if isinstance(budget, str):
        memory = hardware.get("memory_bytes") if isinstance(hardware, dict) else None
        try:
            out["budget_bytes"] = parse_budget(
                budget, device_memory_bytes=memory if isinstance(memory, int) else None
            )
        except BudgetError as exc:
            problems.append(f"budget: {exc}")
    elif "budget" in data:
        out["budget_bytes"] = budget

    if "measured" in data:
        out["measured"] = _rename(data["measured"], _V1_MEASURED, "measured", problems)
    if "baseline" in data:
        out["baseline"] = data["baseline"]
    search = data.get("search")
    if search is not None:
        search = _rename(search, _V1_SEARCH, "search", problems)
        if isinstance(search, dict):  # v1 searches were always TPE maximising throughput
            search.setdefault("objective", "throughput")
            search.setdefault("sampler", "tpe")
    if "search" in data:
        out["search"] = search
    return out


# --------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """``text`` safe inside a YAML comment: no line breaks, no control characters."""
    return " ".join("".join(c if c.isprintable() else " " for c in text).split())


def dump_preset(preset: Preset) -> str:
    """The preset as YAML text, with a header comment saying what it is."""
    import yaml

    measured = preset.measured.throughput
    figure = f"{measured[0]:,.1f} {measured[1]}" if measured else "no throughput recorded"
    if preset.baseline is not None and preset.baseline.speedup is not None:
        figure += f" ({preset.baseline.speedup:.2f}x the naive config)"
    budget = "none"
    if preset.budget_bytes:
        budget = f"{preset.budget_bytes / 1e9:.2f} GB ({format_bytes(preset.budget_bytes)})"
    header = [
        f"autotune preset, schema version {preset.schema_version} "
        "(field reference: docs/preset-format.md)",
        f"{preset.name}: model {preset.model.name}, budget {budget}",
        f"measured on {preset.fingerprint.describe()}: {figure}",
        "re-measure on this machine with: autotune presets check <this file>",
    ]
    body = yaml.safe_dump(
        preset_to_dict(preset), sort_keys=False, default_flow_style=False, allow_unicode=True
    )
    return "".join(f"# {_one_line(line)}\n" for line in header) + body


def save_preset(preset: Preset, path: str | Path, *, overwrite: bool = True) -> Path:
    """Write ``preset`` to ``path`` atomically (a temp file in the same folder, then
    ``os.replace``): a crash leaves the old file or the new one, never half of one."""
    text = dump_preset(preset)  # before touching the disk: a failure here writes nothing
    target = Path(path).expanduser()
    if target.is_dir():
        raise _fail(f"cannot write preset to {str(target)!r}: it is a directory")
    if not overwrite and target.exists():
        raise _fail(f"preset file {str(target)!r} already exists (overwrite it, or pick a name)")
    try:
        atomic_write_text(target, text, overwrite=overwrite)
    except FileExistsError:
        raise _fail(
            f"preset file {str(target)!r} already exists (overwrite it, or pick a name)"
        ) from None
    except OSError as exc:
        raise _fail(f"cannot write preset to {str(target)!r}: {exc.strerror or exc}") from None
    return target


def atomic_write_text(target: Path, text: str, *, overwrite: bool = True) -> None:
    """Write ``text`` to ``target`` through a temp file and ``os.replace`` (or a hard link
    when ``overwrite`` is False, so an existing file is never clobbered)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        os.chmod(tmp, mode)
        if overwrite:
            os.replace(tmp, target)
        else:
            try:
                os.link(tmp, target)  # fails if the target appeared meanwhile
            except FileExistsError:
                raise
            except OSError:  # a file system without hard links: check, then replace
                if target.exists():
                    raise FileExistsError(errno.EEXIST, "File exists", str(target)) from None
                os.replace(tmp, target)
            else:
                tmp.unlink()
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _read_yaml(path: Path) -> Any:
    """Read a YAML file with ``yaml.safe_load``; every failure is a one-paragraph PresetError."""
    import yaml

    where = str(path)
    if not path.exists():
        raise _fail(f"preset file {where!r} does not exist")
    if path.is_dir():
        raise _fail(f"{where!r} is a directory, not a preset file")
    try:
        size = path.stat().st_size
        if size > _MAX_FILE_BYTES:
            raise _fail(
                f"{where!r} is {format_bytes(size)}, too large to be a preset (a preset is a "
                "few KB of YAML)"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise _fail(f"cannot read preset file {where!r}: {exc.strerror or exc}") from None
    if b"\x00" in raw:
        raise _fail(f"{where!r} is a binary file, not a YAML preset")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _fail(
            f"{where!r} is not UTF-8 text (byte {exc.start}), so not a YAML preset"
        ) from None
    if not text.strip():
        raise _fail(f"preset file {where!r} is empty")
    try:
        return yaml.safe_load(text)
    except yaml.constructor.ConstructorError as exc:
        tag = _one_line(str(exc.problem or ""))
        raise _fail(
            f"{where!r} uses a YAML tag that autotune does not load ({tag}{_mark(exc)}); "
            "presets are plain data, and tags such as !!python/object that would construct "
            "Python objects are refused"
        ) from None
    except yaml.YAMLError as exc:
        raise _fail(f"{where!r} is not valid YAML: {_yaml_problem(exc)}") from None
    except (RecursionError, ValueError, OverflowError) as exc:
        raise _fail(f"{where!r} cannot be read as YAML: {type(exc).__name__}") from None


def _mark(exc: Any) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f", line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""


def _yaml_problem(exc: Exception) -> str:
    problem = getattr(exc, "problem", None)
    if problem:
        return _one_line(str(problem)) + _mark(exc)
    return _one_line(str(exc))


def load_preset(path: str | Path) -> Preset:
    """Read and validate a preset file. Any problem is a ``PresetError`` (exit code 2)."""
    target = Path(path).expanduser()
    data = _read_yaml(target)
    if data is None:
        raise _fail(f"preset file {str(target)!r} is empty (nothing but comments)")
    return preset_from_dict(data, source=str(target))


# --------------------------------------------------------------------------------------
# Portability
# --------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class PortabilityReport:
    """How this device compares with the one a preset was measured on."""

    same_device: bool
    differences: list[str]
    warnings: list[str]
    measured_elsewhere: bool
    device: str = ""  # the device checked here: cpu, cuda:0, ...
    device_name: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _find_device(device: str, profile: HardwareProfile) -> tuple[str, GPUInfo | None]:
    """``device`` in canonical form (``cpu``, ``cuda:N``) and its GPU (None for the CPU)."""
    text = device.strip().lower()
    if text == "cpu":
        return "cpu", None
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if match is None:
        raise HardwareMismatchError(f"unknown device {device!r}: expected cpu, cuda or cuda:N")
    index = int(match[1] or 0)
    for gpu in profile.gpus:
        if gpu.index == index:
            return f"cuda:{index}", gpu
    here = ", ".join(["cpu", *(f"cuda:{g.index} ({g.name})" for g in profile.gpus)])
    raise HardwareMismatchError(f"device {device!r} does not exist here; this machine has {here}")


def default_device_for(preset: Preset, profile: HardwareProfile) -> str:
    """The device a preset runs on here by default: a GPU for a GPU preset where there is one."""
    if preset.fingerprint.device_kind == "cuda" and profile.gpus:
        return "cuda:0"
    return "cpu" if preset.fingerprint.device_kind == "cpu" else profile.default_device


def _same_name(a: str, b: str) -> bool:
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


def check_portability(
    preset: Preset, profile: HardwareProfile, device: str | None = None, *, force: bool = False
) -> PortabilityReport:
    """Compare ``preset``'s fingerprint with ``device`` on this machine.

    Same GPU model (or CPU model and core count): fine. Different: a warning, and the
    figures are marked as measured elsewhere. A precision this device cannot run, or a
    recorded peak memory above this device's free memory, raises ``HardwareMismatchError``
    with what to do instead; ``force=True`` turns the memory refusal into a warning (an
    unrunnable precision is refused even then).
    """
    canonical, gpu = _find_device(device or default_device_for(preset, profile), profile)
    here = Fingerprint.from_profile(profile, canonical)
    there = preset.fingerprint

    differences = []
    for f in dataclasses.fields(Fingerprint):
        a, b = getattr(there, f.name), getattr(here, f.name)
        if a != b:
            shown_a = format_bytes(a) if f.name == "memory_bytes" else a
            shown_b = format_bytes(b) if f.name == "memory_bytes" else b
            differences.append(f"{f.name}: preset {shown_a!s} vs here {shown_b!s}")

    if gpu is not None:
        same = there.device_kind == "cuda" and _same_name(there.device_name, here.device_name)
    else:
        same = (
            there.device_kind == "cpu"
            and _same_name(there.cpu_model, here.cpu_model)
            and there.cpu_cores == here.cpu_cores
        )
    warnings = []
    if not same:
        warnings.append(
            f"this preset was measured on {there.describe()}, not on {here.describe()}: its "
            "figures were measured elsewhere and may not hold here (re-measure with "
            "`autotune presets check`)"
        )
    elif there.torch_version != here.torch_version:
        warnings.append(
            f"measured with torch {there.torch_version}, this is torch {here.torch_version}: "
            "throughput may differ"
        )

    refusals = _precision_refusals(preset.config.precision, profile, gpu, warnings)
    peak = preset.measured.peak_memory_bytes
    if gpu is not None:
        free = gpu.free_memory_bytes
        where = f"{canonical} ({gpu.name})"
        if free is None:
            free = gpu.total_memory_bytes
            warnings.append(f"free memory of {where} unknown; compared with its total memory")
        what = "free GPU memory"
    else:
        free = profile.cpu.available_ram_bytes
        where = "this machine"
        what = "available RAM"
    if peak is None:
        warnings.append("the preset records no peak memory, so whether it fits here is unchecked")
    elif peak > free:
        message = (
            f"the preset's recorded peak memory {format_bytes(peak)} exceeds the "
            f"{format_bytes(free)} of {what} on {where}"
        )
        if force:
            warnings.append(message + " (forced: it may run out of memory)")
        else:
            refusals.append(
                message + "; free some memory, pick a smaller preset, or force it (--force)"
            )
    if refusals:
        raise HardwareMismatchError(
            f"preset {preset.name!r} cannot run on {canonical} ({here.device_name}): "
            + "; and ".join(refusals)
        )
    return PortabilityReport(
        same_device=same,
        differences=differences,
        warnings=warnings,
        measured_elsewhere=not same,
        device=canonical,
        device_name=here.device_name,
    )


def _precision_refusals(
    precision: str, profile: HardwareProfile, gpu: GPUInfo | None, warnings: list[str]
) -> list[str]:
    """Why ``precision`` cannot run on ``gpu`` (or the CPU), with the fallback to use."""
    if gpu is not None:
        cc = "{}.{}".format(*gpu.compute_capability)
        if precision == "bf16" and not gpu.bf16_supported:
            return [
                f"config.precision bf16 needs compute capability 8.0 or newer and {gpu.name} "
                f"is {cc}; use fp16 instead (same memory, with a loss scaler): set "
                "config.precision: fp16, or search again on this GPU"
            ]
        if precision == "tf32" and not gpu.tf32_supported:
            return [
                f"config.precision tf32 needs compute capability 8.0 or newer and {gpu.name} "
                f"is {cc}; use fp32 (or fp16 for speed): set config.precision: fp32"
            ]
        return []
    if precision in ("fp16", "tf32"):
        fallback = (
            "fp32 or bf16 (this CPU has native bf16)"
            if profile.cpu.bf16_native
            else "fp32 (bf16 also runs, but this CPU emulates it slowly)"
        )
        return [
            f"config.precision {precision} needs a CUDA GPU and this device is a CPU; use "
            f"{fallback}: set config.precision: fp32"
        ]
    if precision == "bf16" and not profile.cpu.bf16_native:
        warnings.append(
            "config.precision bf16: this CPU has no bf16 units (no avx512_bf16/amx_bf16), so "
            "bf16 is emulated and likely much slower than fp32"
        )
    return []


# --------------------------------------------------------------------------------------
# Finding presets
# --------------------------------------------------------------------------------------


def builtin_preset_dir() -> Path | None:
    """The presets shipped with autotune (``autotune/presets`` in a wheel, ``presets/`` in
    a source checkout), or None when there is no such folder."""
    from importlib import resources

    candidates: list[Any] = []
    with contextlib.suppress(ModuleNotFoundError):
        candidates.append(resources.files("autotune.presets"))
    candidates.append(resources.files("autotune") / "presets")
    candidates.append(Path(__file__).resolve().parent.parent / "presets")  # source checkout
    for candidate in candidates:
        path = Path(str(candidate))
        if path.is_dir():
            return path
    return None


def user_preset_dir() -> Path:
    """``$AUTOTUNE_CONFIG_DIR/presets``, else ``$XDG_CONFIG_HOME/autotune/presets``, else
    ``~/.config/autotune/presets``."""
    root = os.environ.get("AUTOTUNE_CONFIG_DIR")
    if root:
        return Path(root).expanduser() / "presets"
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "autotune" / "presets"


def _yaml_files(folder: Path, *, recursive: bool) -> Iterator[Path]:
    if not folder.is_dir():
        return iter(())
    patterns = ("*.yaml", "*.yml")
    found = {p for pat in patterns for p in (folder.rglob(pat) if recursive else folder.glob(pat))}
    return iter(sorted(p for p in found if p.is_file() and not p.name.startswith(".")))


def _looks_like_preset(path: Path) -> bool:
    try:
        data = _read_yaml(path)
    except PresetError:
        return False
    return isinstance(data, Mapping) and "schema_version" in data and "config" in data


def find_presets() -> list[tuple[str, Path]]:
    """Every preset in reach, as ``(origin, path)``: ``builtin`` (shipped, recursively),
    ``cwd`` (``*.yaml`` files here with ``schema_version`` and ``config`` at the top) and
    ``user`` (``user_preset_dir()``, recursively)."""
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()

    def add(origin: str, path: Path) -> None:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            found.append((origin, path))

    builtin = builtin_preset_dir()
    if builtin is not None:
        for path in _yaml_files(builtin, recursive=True):
            add("builtin", path)
    for path in _yaml_files(Path.cwd(), recursive=False):
        if _looks_like_preset(path):
            add("cwd", path)
    for path in _yaml_files(user_preset_dir(), recursive=True):
        add("user", path)
    return found


def preset_ref(origin: str, path: Path) -> str:
    """The short name that ``resolve_preset`` finds ``path`` by: its path below its folder,
    without the suffix (``cpu/mu``), or the file's name for the working directory."""
    if origin == "builtin":
        root = builtin_preset_dir()
    elif origin == "user":
        root = user_preset_dir()
    else:
        root = None
    if root is not None:
        with contextlib.suppress(ValueError):
            return path.resolve().relative_to(root.resolve()).with_suffix("").as_posix()
    return path.with_suffix("").name


_RESOLVE_ORDER = {"cwd": 0, "user": 1, "builtin": 2}


def resolve_preset(name_or_path: str) -> Path:
    """A preset file: ``name_or_path`` itself where it is a file, else the shipped, user or
    working-directory preset of that name (file name without ``.yaml``, or its ``name``
    field). Unknown: a ``PresetError`` listing what exists."""
    candidate = Path(name_or_path).expanduser()
    if candidate.is_file():
        return candidate
    if candidate.is_dir():
        raise _fail(f"{name_or_path!r} is a directory, not a preset file")
    presets = sorted(find_presets(), key=lambda item: _RESOLVE_ORDER.get(item[0], 9))
    refs = [(preset_ref(origin, path), origin, path) for origin, path in presets]
    wanted = name_or_path.removesuffix(".yaml").removesuffix(".yml")
    for ref, _, path in refs:  # the full name; the working directory first, then user, shipped
        if ref == wanted:
            return path
    short = [(ref, origin, path) for ref, origin, path in refs if Path(ref).name == wanted]
    if len(short) == 1:
        return short[0][2]
    if short:
        which = ", ".join(f"{ref} ({origin})" for ref, origin, _ in short)
        raise _fail(f"preset name {name_or_path!r} is ambiguous: {which}; give the full name")
    for _, _, path in refs:  # second chance: the `name:` inside each file
        with contextlib.suppress(PresetError):
            if load_preset(path).name == name_or_path:
                return path
    known = [ref for ref, _, _ in refs]
    listing = ", ".join(f"{ref} ({origin})" for ref, origin, _ in refs) or "none"
    looks_like_path = any(sep in name_or_path for sep in "/\\") or name_or_path.endswith(
        (".yaml", ".yml")
    )
    what = "preset file" if looks_like_path else "preset"
    raise _fail(
        f"no {what} {name_or_path!r}{did_you_mean(wanted, known)}: give a path to a preset "
        f"file or the name of one; presets found: {listing} (shipped ones, *.yaml presets in "
        f"the working directory, and {user_preset_dir()})"
    )
