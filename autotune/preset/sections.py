"""The sections of a preset, each a frozen dataclass that validates itself.

A preset says what it is (``model``, ``task``, ``config``, budget), where it was measured
(the hardware ``fingerprint``), what was measured there (``measured``, with the naive
``baseline`` beside it), how it was found (``search``) and how to train with it
(``training``, the ``TrainingDefaults`` of autotune/config/train_config.py). The field reference is
docs/preset-format.md; the validation itself is autotune/core/validator.py.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core.errors import (
    ConfigError,
    HardwareMismatchError,
    PresetError,
    UntrustedModelError,
    UsageError,
)
from autotune.core.text import control_problem
from autotune.core.units import format_bytes, throughput_label
from autotune.core.validator import (
    BAD,
    SIZE,
    Converter,
    Rule,
    Section,
    non_empty,
    non_negative,
    positive,
    show,
)
from autotune.machine.profile import cpu_generation

if TYPE_CHECKING:
    from pathlib import Path

    from autotune.burst.result import BurstResult
    from autotune.contract.spec import ModelSpec
    from autotune.machine.profile import GPUInfo, HardwareProfile

__all__ = [
    "OLDEST_SCHEMA_VERSION",
    "PRESET_SCHEMA_VERSION",
    "Baseline",
    "Fingerprint",
    "Measured",
    "ModelRef",
    "Preset",
    "Race",
    "RaceEntry",
    "SearchSummary",
    "Task",
    "TrainingDefaults",
    "find_device",
    "utc_now",
]

PRESET_SCHEMA_VERSION = 2
OLDEST_SCHEMA_VERSION = 1


def utc_now() -> str:
    """The current time as an ISO 8601 UTC timestamp, e.g. ``2024-05-01T12:00:00Z``."""
    return (
        _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    )


# -- rules only a preset has ------------------------------------------------------------------

_CAPABILITY = re.compile(r"^\d+\.\d+$")


def _capability(value: str) -> str | None:
    if _CAPABILITY.match(value):
        return None
    return f"expected a compute capability such as '8.0'; got {show(value)}"


def _size_name(value: str) -> str | None:
    if not value.isidentifier() or len(value) > 32:
        return f"expected a short name such as 'seq' or 'image'; got {show(value)}"
    return None


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
    return f"expected an ISO 8601 UTC timestamp such as 2024-05-01T12:00:00Z; got {show(value)}"


def _name(value: str) -> str | None:
    """A name: not empty, one line of printable text."""
    return non_empty(value) or control_problem(value)


def _names(values: tuple[str, ...]) -> str | None:
    for index, value in enumerate(values):
        problem = control_problem(value)
        if problem:
            return f"[{index}] {problem}"
    return None


def _plain_names(value: Any, where: str = "") -> str | None:
    """The first key or string in free-form data (a model's args) that is not one line of
    printable text, with where it sits."""
    if isinstance(value, str):
        problem = control_problem(value)
        return f"{where or 'the value'} {problem}" if problem else None
    items: list[tuple[str, Any]] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = control_problem(key) if isinstance(key, str) else None
            if problem:
                return f"the key {show(key)} {problem}"
            items.append((f"{where}.{key}" if where else str(key), item))
    elif isinstance(value, (list, tuple)):
        items = [(f"{where}[{i}]", item) for i, item in enumerate(value)]
    for place, item in items:
        problem = _plain_names(item, place)
        if problem:
            return problem
    return None


def _current_version(value: int) -> str | None:
    if value == PRESET_SCHEMA_VERSION:
        return None
    return f"a loaded preset is always version {PRESET_SCHEMA_VERSION}; got {value!r}"


# -- the config inside a preset ---------------------------------------------------------------


class _Opaque:
    """Stands in for a list or mapping where TrainConfig expects one value, so that its
    messages (which repr the value in full) stay short."""

    def __init__(self, value: Any) -> None:
        self.text = show(value)

    def __repr__(self) -> str:
        return self.text


def _convert_config(value: Any, path: str, problems: list[str]) -> Any:
    """A ``TrainConfig`` from plain data (its own messages, under ``path``), with knobs that
    are plain scalars; or ``BAD``."""
    if isinstance(value, TrainConfig):
        config = value
    else:
        if isinstance(value, Mapping):
            value = {
                k: _Opaque(v)
                if isinstance(v, (list, tuple, set, Mapping))
                and not (k in ("knobs", "parallel") and isinstance(v, Mapping))
                else v
                for k, v in value.items()
            }
        try:
            config = TrainConfig.from_mapping(value, path=path)
        except ConfigError as exc:
            problems.extend(exc.problems)
            return BAD
    bad = False
    for name, knob in config.knobs.items():
        if not isinstance(name, str):
            problems.append(f"{path}.knobs: keys must be strings, got {show(name)}")
            bad = True
        elif control_problem(name):
            problems.append(f"{path}.knobs: the knob {show(name)} {control_problem(name)}")
            bad = True
        elif isinstance(knob, str) and control_problem(knob):
            problems.append(f"{path}.knobs.{name}: {control_problem(knob)}")
            bad = True
        elif not (knob is None or isinstance(knob, (bool, int, str, float))) or (
            isinstance(knob, float) and not math.isfinite(knob)
        ):
            problems.append(
                f"{path}.knobs.{name}: expected a string, number, true/false or null; "
                f"got {show(knob)}"
            )
            bad = True
    return BAD if bad else config


class _PresetSection(Section):
    """A section of a preset: its problems are a ``PresetError`` ("invalid preset ...")."""

    _converters: ClassVar[Mapping[Any, Converter]] = {TrainConfig: _convert_config}
    _error: ClassVar[type[ConfigError]] = PresetError
    _record: ClassVar[str] = "preset"


def find_device(device: str, profile: HardwareProfile) -> tuple[str, GPUInfo | None]:
    """``device`` in canonical form (``cpu``, ``cuda:N``) and its GPU (None for the CPU).

    The hardware profile parses device names; for a preset, a name that is no device at
    all is a mismatch too."""
    try:
        return profile.resolve_device(device)
    except HardwareMismatchError:
        raise
    except UsageError as exc:
        raise HardwareMismatchError(str(exc)) from None


_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _sha256_text(value: str | None) -> str | None:
    if value is None or _SHA256.match(value):
        return None
    return "expected 64 lowercase hex digits (a SHA-256)"


# -- the sections -----------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ModelRef(_PresetSection):
    """Which model: a built-in name (``mu``) or a user reference (``pkg.mod:spec``,
    ``path/to/file.py:spec``), and overrides of that spec's size arguments."""

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    # SHA-256 of the user code's file when the search ran (None for a built-in model), so
    # that running the preset later can tell the user the code has changed since.
    sha256: str | None = None

    _path: ClassVar[str] = "model"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "name": _name,
        "args": _plain_names,
        "sha256": _sha256_text,
    }

    def load(
        self, *, trust: bool = False, notes: list[str] | None = None, again: bool = True
    ) -> ModelSpec:
        """The spec this reference names, with its size arguments applied. A preset is
        data: a built-in model loads as it is, user code (a model file or module) only with
        ``trust=True``, the user's explicit consent; otherwise ``UntrustedModelError``
        (``again``: advising --model too, where the command has it). With consent, ``notes``
        gets the file that runs and a warning if it changed since the search (its recorded
        hash). ``ModelLoadError`` for an unknown or broken model."""
        from autotune.models.registry import is_user_code, load_model, source_file, source_sha256

        user_code = is_user_code(self.name)
        if user_code and not trust:
            raise UntrustedModelError(
                f"this preset's model is user code, {self.name!r}, and a preset is data: "
                "autotune does not run the code a preset names unless you say so. Read "
                "that code first; then run again with --trust-model"
                + (f", or give the same reference with --model {self.name}" if again else "")
            )
        spec = load_model(self.name)
        if user_code and notes is not None:
            notes.extend(self._code_notes(source_file(self.name), source_sha256(self.name)))
        return spec.with_args(**self.args) if self.args else spec

    def _code_notes(self, path: Path | None, digest: str | None) -> list[str]:
        where = str(path) if path is not None else self.name
        lines = [f"running user code from {where}" + (f" (sha256 {digest[:12]})" if digest else "")]
        if self.sha256 is not None and digest is not None and digest != self.sha256:
            lines.append(
                f"warning: {where} has changed since this preset was searched (sha256 "
                f"{self.sha256[:12]} then, {digest[:12]} now): its figures may not hold"
            )
        return lines


@dataclass(frozen=True, kw_only=True)
class Task(_PresetSection):
    """The training task the config was tuned for."""

    seq_len: int
    global_batch: int  # samples per optimizer step (kept fixed by the search)
    size_name: str = "seq"  # what seq_len is for the model: seq, image, nodes (its spec's)

    _path: ClassVar[str] = "task"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "seq_len": SIZE,
        "global_batch": SIZE,
        "size_name": _size_name,
    }

    def size_label(self) -> str:
        """``"seq 128"``, ``"image 64"``."""
        return f"{self.size_name} {self.seq_len}"


@dataclass(frozen=True, kw_only=True)
class Fingerprint(_PresetSection):
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
    # x86's CPU family and model numbers: a VM often names only the brand ("AMD EPYC"),
    # and two CPUs of one name and other numbers differ (mu at 3,889 and 6,785 tokens/s).
    # None where unknown (an older preset, or not x86).
    cpu_family: int | None = None
    cpu_model_number: int | None = None

    _path: ClassVar[str] = "fingerprint"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "device_name": _name,
        "memory_bytes": non_negative,
        "compute_capability": _capability,
        "driver_version": control_problem,
        "cuda_version": control_problem,
        "torch_version": control_problem,
        "autotune_version": control_problem,
        "cpu_model": control_problem,
        "cpu_cores": positive,
        "cpu_family": non_negative,
        "cpu_model_number": non_negative,
    }

    @classmethod
    def from_profile(cls, profile: HardwareProfile, device: str) -> Fingerprint:
        """The fingerprint of ``device`` (``cpu``, ``cuda``, ``cuda:N``) on this machine."""
        _, gpu = find_device(device, profile)
        cpu, software = profile.cpu, profile.software
        host: dict[str, Any] = {  # the software and the host CPU, for either kind of device
            "torch_version": software.torch_version,
            "autotune_version": software.autotune_version,
            "cpu_model": cpu.model_name,
            "cpu_cores": cpu.physical_cores or cpu.logical_cores,
            "cpu_family": cpu.family,
            "cpu_model_number": cpu.model_number,
        }
        if gpu is None:
            return cls(
                device_kind="cpu",
                device_name=cpu.model_name,
                memory_bytes=cpu.total_ram_bytes,
                **host,
            )
        major, minor = gpu.compute_capability
        return cls(
            device_kind="cuda",
            device_name=gpu.name,
            memory_bytes=gpu.total_memory_bytes,
            compute_capability=f"{major}.{minor}",
            driver_version=gpu.driver_version,
            cuda_version=gpu.cuda_version or software.torch_cuda_version,
            **host,
        )

    @property
    def cpu_generation(self) -> str:
        """``"family 26, model 2"``, or "" where unknown."""
        return cpu_generation(self.cpu_family, self.cpu_model_number)

    def describe(self) -> str:
        """``NVIDIA A100-SXM4-80GB (cuda, 80.00 GiB)``, ``Intel Xeon (cpu, 4 cores)`` or
        ``AMD EPYC (family 26, model 2; cpu, 2 cores)``."""
        if self.device_kind == "cuda":
            return f"{self.device_name} (cuda, {format_bytes(self.memory_bytes)})"
        generation = f"{self.cpu_generation}; " if self.cpu_generation else ""
        return f"{self.device_name} ({generation}cpu, {self.cpu_cores} cores)"


@dataclass(frozen=True, kw_only=True)
class Measured(_PresetSection):
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
        "tokens_per_s": non_negative,
        "samples_per_s": non_negative,
        "step_time_median_s": non_negative,
        "step_time_p90_s": non_negative,
        "peak_memory_bytes": non_negative,
        "mfu": non_negative,
        "compile_s": non_negative,
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
            return self.tokens_per_s, throughput_label("tokens")
        if self.samples_per_s is not None:
            return self.samples_per_s, throughput_label("samples")
        return None


@dataclass(frozen=True, kw_only=True)
class Baseline(_PresetSection):
    """The naive config, measured in the same study, and the preset's speedup over it."""

    config: TrainConfig
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    speedup: float | None = None  # measured throughput / baseline throughput

    _path: ClassVar[str] = "baseline"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "tokens_per_s": non_negative,
        "samples_per_s": non_negative,
        "speedup": non_negative,
    }


@dataclass(frozen=True, kw_only=True)
class SearchSummary(_PresetSection):
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
    # the memory model: predictions checked against measured peaks, mean |error| in %
    memory_predictions: int = 0
    memory_error_pct: float | None = None

    _path: ClassVar[str] = "search"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "memory_predictions": non_negative,
        "memory_error_pct": non_negative,
        "trials_run": non_negative,
        "infeasible": non_negative,
        "pruned": non_negative,
        "failed": non_negative,
        "wall_s": non_negative,
        "study_name": control_problem,
        "storage": control_problem,
        "objective": control_problem,
        "sampler": control_problem,
    }


@dataclass(frozen=True, kw_only=True)
class RaceEntry(_PresetSection):
    """One config of the finalist race: its rounds, as measured."""

    label: str  # "#12 (expert)"
    roles: tuple[str, ...] = ()  # finalist, naive, expert
    trial: int | None = None  # the study's trial the config comes from
    config: str = ""  # the config, summarized
    median: float | None = None  # median throughput over the rounds (the race's unit)
    spread: float | None = None  # (best - worst) / median over the rounds
    samples: tuple[float | None, ...] = ()  # throughput per round (None: no figure)
    walls_s: tuple[float, ...] = ()  # per round: its burst's wall time, start-up included
    ratio_to_naive: float | None = None  # geometric mean of the per-round ratios
    problem: str = ""  # why it could not win ("" when it could)
    at_edge: str = ""  # why it fits the budget only narrowly ("" when it has headroom)
    eliminated: str = ""  # why it left the race early ("" when it ran every round)

    _path: ClassVar[str] = "race.entries"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "label": _name,
        "roles": _names,
        "median": non_negative,
        "spread": non_negative,
        "ratio_to_naive": non_negative,
    }


@dataclass(frozen=True, kw_only=True)
class Race(_PresetSection):
    """The finalist race that chose the config (study/race/finalist_race.py): its rounds and
    figures."""

    rounds: int
    unit: str  # tokens/s or samples/s
    winner: str  # an entry's label
    runner_up: str | None = None
    speedup: float | None = None  # winner over naive, paired rounds
    speedup_interval: tuple[float, float] | None = None  # 95% bootstrap over the rounds
    margin: float | None = None  # winner over the runner-up, paired rounds
    margin_interval: tuple[float, float] | None = None
    speedup_reason: str | None = None  # why no speedup, or its basis if not paired rounds
    interval_reason: str | None = None  # why no interval ("1 round")
    entries: tuple[RaceEntry, ...] = ()
    load: Mapping[str, Any] | None = None  # what the machine watch saw during the race
    busy_rounds: tuple[bool, ...] = ()  # per round: run under outside load (left out)

    _path: ClassVar[str] = "race"
    _rules: ClassVar[Mapping[str, Rule]] = {
        "rounds": positive,
        "unit": control_problem,
        "winner": control_problem,
        "runner_up": control_problem,
        "speedup": non_negative,
        "margin": non_negative,
        "speedup_reason": control_problem,
        "interval_reason": control_problem,
    }

    def _cross_problems(self) -> list[str]:
        labels = [e.label for e in self.entries]
        if self.entries and self.winner not in labels:
            return [f"race.winner: {self.winner!r} is not one of the entries ({labels})"]
        return []


@dataclass(frozen=True, kw_only=True)
class Preset(_PresetSection):
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
    race: Race | None = None
    fingerprint: Fingerprint
    training: TrainingDefaults = field(default_factory=TrainingDefaults)
    notes: str = ""

    _path: ClassVar[str] = ""
    _rules: ClassVar[Mapping[str, Rule]] = {
        "schema_version": _current_version,
        "name": _name,
        "budget_bytes": positive,
        "created": _created,
    }
    # YAML turns an unquoted timestamp into a datetime: take it, as canonical UTC text.
    _normalize: ClassVar[Mapping[str, Callable[[Any], Any]]] = {
        "created": lambda value: _parse_created(value) or value
    }

    def _cross_problems(self) -> list[str]:
        # The config is the whole run's: under DDP each process takes grad_accum / world
        # size of it (autotune/engine/distributed.py), so micro_batch x grad_accum is the global
        # batch whatever the process count (autotune/study/session/outcome.py writes it so).
        config, task = self.config, self.task
        if config.global_batch != task.global_batch:
            return [
                f"config: micro_batch x grad_accum = {config.micro_batch} x "
                f"{config.grad_accum} = {config.global_batch} samples per step, but "
                f"task.global_batch is {task.global_batch}; they must be equal"
            ]
        return []

    @property
    def throughput(self) -> tuple[float, str] | None:
        return self.measured.throughput

    def replace(self, **changes: Any) -> Preset:
        return dataclasses.replace(self, **changes)
