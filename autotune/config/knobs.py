"""The knob registry: one record per TrainConfig field, and what is generated from it.

A field of ``TrainConfig`` is declared with :func:`knob`, which keeps a :class:`KnobDef` in
the field's metadata (as Hugging Face's ``TrainingArguments`` keeps a field's help): its
bounds or allowed values, where a value other than the default runs (and why not
elsewhere), how a search turns it (:class:`Search`), what applies it (the step, the
environment, the DataLoader...), its CLI help, its name in each export and its line in
the docs. :func:`registry` reads the records of a config class in field order.

From the registry come the per-field checks (:func:`field_problems`), the checks against
a model and a device (:func:`device_problems`), the docs table (:func:`docs_table`) and
the export names (:func:`export_names`); the search space and ``autotune bench`` loop over
it too. A new knob is one field declared here, and no other code.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from autotune.core.validator import did_you_mean, show

if TYPE_CHECKING:
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "EXPORT_FRAMEWORKS",
    "NO_PREFERENCE",
    "REQUIRED",
    "Applies",
    "BackendFlag",
    "EnvSetting",
    "KnobDef",
    "Search",
    "Where",
    "checkpointing",
    "convolutional",
    "backend_settings",
    "default_config",
    "describe_value",
    "device_problems",
    "docs_table",
    "env_settings",
    "environment",
    "export_names",
    "field_problems",
    "knob",
    "mapping_rule",
    "micro_batches",
    "on_cpu",
    "on_cuda",
    "registry",
    "searched_knobs",
    "searched_only_on",
    "seq_len_problem",
    "switch_knobs",
]

EXPORT_FRAMEWORKS = ("hf", "lightning", "accelerate", "deepspeed")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()  # a field with no default (the caller must give it)
NO_PREFERENCE: Any = object()  # a starting point that keeps the knob at its default


@dataclass(frozen=True, kw_only=True)
class Where:
    """What decides where a knob runs and what a search tries: the model, the device,
    this machine's usable cores, and (for a search) the global batch and the lengths."""

    spec: ModelSpec
    device: DeviceCaps
    cores: int = 1
    global_batch: int = 1
    seq_lens: tuple[int, ...] = ()

    def fill(self, template: str, name: str) -> str:
        """A reason's text with ``{name}``, ``{model}`` and ``{device}`` filled in."""
        return template.format(name=name, model=self.spec.name, device=self.device.device)


@dataclass(frozen=True)
class Applies:
    """One condition for a knob's non-default values, with the reason shown where it fails
    (``{name}``, ``{model}`` and ``{device}`` are filled in), or a function that writes
    the reason for the device at hand (why torch.compile cannot run: the probe's words)."""

    test: Callable[[Where], bool]
    reason: str | Callable[[Where], str]

    def problem(self, name: str, where: Where) -> str | None:
        if self.test(where):
            return None
        return self.reason(where) if callable(self.reason) else where.fill(self.reason, name)


def _cuda(where: Where) -> bool:
    return where.device.kind == "cuda"


def _cpu(where: Where) -> bool:
    return where.device.kind == "cpu"


def on_cuda(reason: str) -> Applies:
    """Only on a CUDA device."""
    return Applies(_cuda, reason)


def on_cpu(reason: str) -> Applies:
    """Only on a CPU device."""
    return Applies(_cpu, reason)


def convolutional(reason: str) -> Applies:
    """Only for a model whose spec says it is convolutional (NCHW images)."""
    return Applies(lambda w: bool(w.spec.convolutional), reason)


def checkpointing(reason: str) -> Applies:
    """Only for a model that supports activation checkpointing."""
    return Applies(lambda w: bool(w.spec.supports_checkpointing), reason)


def micro_batches(where: Where) -> tuple[int, ...]:
    """The powers of two that divide the global batch (so grad_accum is a whole number)."""
    gb, p, out = where.global_batch, 1, []
    while p <= gb:
        if gb % p == 0:
            out.append(p)
        p *= 2
    return tuple(out)


def seq_len_problem(value: int, spec: ModelSpec) -> str | None:
    """A sequence length the model does not accept: past its ``max_seq_len``. The one
    rule for a config (``model_problems``), a search's lengths and an export."""
    limit = spec.max_seq_len
    return None if value <= limit else f"model {spec.name!r} accepts at most {limit}, got {value}"


def mapping_rule(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else f"expected a mapping, got {type(value).__name__}"


@dataclass(frozen=True, kw_only=True)
class Search:
    """How a search turns one knob.

    ``order`` is its place among the dimensions (Optuna samples them in this order, so it
    is kept as it was). ``values`` gives the values tried where every ``only`` condition
    holds (a bool: False and True); elsewhere the knob stays at its default. A ``switch``
    is a dimension only where it holds more than its default. ``only_with``: the knob is
    set only where that knob's value is above 0 (pinning and prefetch need workers).
    ``domain``: every value ``--knob`` may name (default: the allowed values, else those
    searched here); ``why_not`` says why a value of it is not searched here. ``guess`` and
    ``smallest``: the value a hand-tuner's first guess and the least-memory start prefer.
    """

    order: int
    values: Callable[[Where], tuple[Any, ...]] | None = None
    only: tuple[Applies, ...] = ()
    switch: bool = False
    only_with: str | None = None
    domain: tuple[Any, ...] | None = None
    why_not: Callable[[Any, Where], str | None] | None = None
    guess: Any = NO_PREFERENCE
    smallest: Any = NO_PREFERENCE


@dataclass(frozen=True)
class EnvSetting:
    """An environment variable a knob sets when it is on: ``var`` gets ``value`` (with
    ``item``, ``value`` is one ``key:value`` item of a comma-separated list: any other
    setting of that key is replaced, the other items kept). Off, the variable stays as the
    user has it. ``read``: when the process reads it; ``"torch loads"`` means only a process
    started with it runs as measured (a restart), ``"CUDA starts"`` that setting it in
    this process before CUDA starts is enough."""

    var: str
    value: str
    item: bool = False
    read: Literal["torch loads", "CUDA starts"] = "torch loads"

    @property
    def restart(self) -> bool:
        """Whether a process must start with it (it is read when torch loads)."""
        return self.read == "torch loads"

    def wanted(self, current: str | None) -> str:
        """The variable's value with this setting on, given the one it has (``current``)."""
        if not self.item:
            return self.value
        key = self.value.split(":")[0].strip()
        kept = [
            item
            for item in (current or "").split(",")
            if item.strip() and item.split(":")[0].strip() != key
        ]
        return ",".join([*kept, self.value])


@dataclass(frozen=True)
class BackendFlag:
    """A process-wide torch setting a knob decides: ``target`` (a dotted name under
    ``torch``: an attribute that is set, or with ``call`` a function that is called with
    the setting) gets ``on`` where the knob holds ``when``, else ``off``. ``cuda``: only
    for a CUDA device."""

    target: str
    when: Any = True
    on: Any = True
    off: Any = False
    call: bool = False
    cuda: bool = False

    def setting(self, value: Any) -> Any:
        """What ``target`` gets where the knob holds ``value``."""
        return self.on if value == self.when else self.off

    def statement(self) -> str:
        """The line of Python that turns it on (an export's note)."""
        if self.call:
            return f"torch.{self.target}({self.on!r})"
        return f"torch.{self.target} = {self.on!r}"


@dataclass(frozen=True, kw_only=True)
class KnobDef:
    """One knob of a training config: everything about it that is not the step's code."""

    name: str = ""  # the field's name, filled in by ``registry``
    type: Any = None  # the field's annotation, resolved by ``registry``
    default: Any = REQUIRED
    low: int | None = None
    high: int | None = None
    choices: tuple[Any, ...] | None = None
    rule: Callable[[Any], str | None] | None = None  # the check of a mapping or a record
    needs: str | None = None  # set off its default only where this knob is on (not 0, 'off')
    runs: tuple[Applies, ...] = ()  # where a non-default value runs (``check_config``)
    value_problem: Callable[[Any, Where], str | None] | None = None
    search: Search | None = None
    applied_by: str = ""  # what applies it (default: from ``env`` or ``backend``, else the step)
    env: EnvSetting | None = None  # the environment variable it sets when on
    backend: tuple[BackendFlag, ...] = ()  # the process-wide torch flags it decides
    loader_arg: str | None = None  # the DataLoader argument it is (``loader_kwargs``)
    optimizer_arg: str | None = None  # the ``torch.optim.AdamW`` argument it is, when on
    label: str | None = None  # its word in a config's one-line summary (default: dashed name)
    help: str = ""  # the CLI help; "" leaves it off ``autotune bench``
    flag: str | None = None  # the CLI flag (default ``--name-with-dashes``)
    cli_default: Any = NO_PREFERENCE  # the flag's default where it is not ``default``
    exports: Mapping[str, str | None] = field(default_factory=dict)
    # What a user does where an export cannot carry a value off the default (default:
    # from ``env`` or ``backend``); None: another line of the export says it already.
    export_hint: str | None = ""
    doc: str = ""
    doc_type: str | None = None  # the docs' type column (default: from the type and bounds)
    example: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def flag_default(self) -> Any:
        if self.cli_default is not NO_PREFERENCE:
            return self.cli_default
        return None if self.required else self.default

    @property
    def is_bool(self) -> bool:
        return self.type is bool

    @property
    def applier(self) -> str:
        """What applies it: ``applied_by``, else its environment variable or torch flags."""
        if self.applied_by:
            return self.applied_by
        if self.env is not None:
            return f"the environment ({self.env.var}={self.env.value}, before {self.env.read})"
        if self.backend:
            return f"the process ({', '.join('torch.' + f.target for f in self.backend)})"
        return "the step"

    def env_doc(self) -> str:
        """The docs' words for the environment variable it sets ("" where it sets none)."""
        if self.env is None:
            return ""
        how = (
            "which starts itself again with it: it is read once, when torch loads"
            if self.env.restart
            else f"before {self.env.read}"
        )
        return (
            f"; `{self.env.var}={self.env.value}` in the environment of the burst's process "
            f"and of `autotune train`, {how}"
        )

    @property
    def short(self) -> str:
        """Its word in a config's one-line summary."""
        return self.label or self.name.replace("_", "-")

    def hint(self) -> str | None:
        """What to do where an export cannot carry this knob (None: the export says it)."""
        if self.export_hint is None or self.export_hint:
            return self.export_hint
        if self.env is not None:
            what = f" ({self.help.rstrip('.').split(':')[0]})" if self.help else ""
            return (
                f"{self.env.var}={self.env.value} in the environment before the script starts{what}"
            )
        if self.backend:
            return "; ".join(flag.statement() for flag in self.backend)
        return f"{self.applier} applies it; do the same in your script"

    def json_schema(self) -> dict[str, Any]:
        """What the preset's JSON Schema says of this knob beyond its type: its allowed
        values, its bounds and its docs line."""
        out: dict[str, Any] = {}
        if self.choices is not None:
            out["enum"] = list(self.choices)
        if self.low is not None:
            out["minimum"] = self.low
        if self.high is not None:
            out["maximum"] = self.high
        if self.doc or self.help:
            out["description"] = " ".join(((self.doc + self.env_doc()) or self.help).split())
        return out

    def domain(self) -> tuple[Any, ...] | None:
        """Every value a search of this knob could hold (None: whatever it searches)."""
        if self.search is not None and self.search.domain is not None:
            return self.search.domain
        if self.choices is not None:
            return self.choices
        return (False, True) if self.is_bool else None

    def searched(self, where: Where) -> tuple[Any, ...]:
        """The values a search tries here, in order (the default alone where it does not
        apply)."""
        assert self.search is not None
        if any(c.problem(self.name, where) for c in self.search.only):
            return (self.default,)
        if self.search.values is None:
            return (False, True) if self.is_bool else (self.default,)
        return tuple(self.search.values(where))

    def unsearched_reason(self, value: Any, where: Where) -> str | None:
        """Why ``value`` (one of ``domain()``) is not searched here."""
        assert self.search is not None
        if value != self.default:
            for condition in self.search.only:
                if (problem := condition.problem(self.name, where)) is not None:
                    return problem
        return self.search.why_not(value, where) if self.search.why_not else None


def searched_knobs(cls: type) -> tuple[KnobDef, ...]:
    """The knobs of ``cls`` a search turns, in the order they are suggested (read once
    per class, as its registry is: a space asks for them for every config it makes)."""
    if cls not in _SEARCHED:
        _SEARCHED[cls] = tuple(
            sorted((k for k in registry(cls) if k.search), key=lambda k: _order(k))
        )
    return _SEARCHED[cls]


_SEARCHED: dict[type, tuple[KnobDef, ...]] = {}


def _order(k: KnobDef) -> int:
    return k.search.order if k.search is not None else 0


def switch_knobs(cls: type | None = None) -> tuple[KnobDef, ...]:
    """The on/off switches a search turns, in the order they are suggested."""
    knobs = searched_knobs(cls or _default())
    return tuple(k for k in knobs if k.search is not None and k.search.switch)


def searched_only_on(k: KnobDef) -> str | None:
    """The device kind a switch is searched on alone (``cuda``, ``cpu``), else None."""
    if k.search is None or not k.search.switch:
        return None
    tests = {condition.test for condition in k.search.only}
    return "cuda" if _cuda in tests else "cpu" if _cpu in tests else None


def knob(**entry: Any) -> Any:
    """A TrainConfig field declared with its registry entry (the ``KnobDef`` arguments)."""
    record = KnobDef(**entry)
    metadata = {"knob": record}
    if record.default is REQUIRED:
        return field(metadata=metadata)
    if isinstance(record.default, (dict, list)):
        default = record.default
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=record.default, metadata=metadata)


_REGISTRIES: dict[type, tuple[KnobDef, ...]] = {}
_DEFAULT: list[type] = []  # the config class autotune runs (TrainConfig declares itself)

C = TypeVar("C", bound=type)


def default_config(cls: C) -> C:
    """Class decorator: ``cls`` is the config whose registry ``export_names`` and
    ``docs_table`` read when given none."""
    _DEFAULT[:] = [cls]
    return cls


def _default() -> type:
    if not _DEFAULT:  # autotune.config imports train_config, which declares TrainConfig
        raise LookupError("no config class is declared with @default_config")
    return _DEFAULT[0]


def registry(cls: type) -> tuple[KnobDef, ...]:
    """Every knob of the config class ``cls``, in field order (its name and type filled in)."""
    if cls not in _REGISTRIES:
        _REGISTRIES[cls] = _read_registry(cls)
    return _REGISTRIES[cls]


def _read_registry(cls: type) -> tuple[KnobDef, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        record = f.metadata.get("knob")
        if record is None:
            raise TypeError(f"{cls.__name__}.{f.name} is not declared with knob()")
        out.append(dataclasses.replace(record, name=f.name, type=hints[f.name]))
    return tuple(out)


# -- the checks -----------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _value_problem(k: KnobDef, value: Any) -> str | None:
    """What is wrong with ``value`` for ``k`` on its own (type, range, allowed values)."""
    optional = value is None and k.type in (int | None,)
    if k.rule is not None:
        return k.rule(value)
    if optional or k.type not in (int, bool, str, int | None):
        return None
    if k.is_bool:
        return None if isinstance(value, bool) else f"expected true or false, got {show(value)}"
    if k.choices is not None:
        if value in k.choices:
            return None
        hint = did_you_mean(value, [str(c) for c in k.choices]) if isinstance(value, str) else ""
        return f"expected one of {', '.join(map(str, k.choices))}; got {show(value)}{hint}"
    low = 1 if k.low is None else k.low
    if _is_int(value) and value >= low and (k.high is None or value <= k.high):
        return None
    too_large = _is_int(value) and value > low
    if k.high is not None and (too_large or low != 1):
        what = f" ({k.help.rstrip('.')})" if k.help else ""
        return f"expected an integer from {low} to {k.high}{what}, got {show(value)}"
    null = " or null" if k.type == int | None else ""
    return f"expected a positive integer{null}, got {show(value)}"


def field_problems(config: Any, *, path: str = "config") -> list[str]:
    """Every problem of each field of ``config`` on its own, and of a field set where the
    knob it needs is off, each with its path."""
    problems: list[str] = []
    knobs = registry(type(config))
    bad = set()
    for k in knobs:
        problem = _value_problem(k, getattr(config, k.name))
        if problem is not None:
            problems.append(f"{path}.{k.name}: {problem}")
            bad.add(k.name)
    for k in knobs:
        value, needed = getattr(config, k.name), k.needs
        if needed is None or needed in bad or k.name in bad or value == k.default:
            continue
        needed_value = getattr(config, needed)
        if needed_value in (0, "off"):
            on = "on" if isinstance(needed_value, str) else "> 0"
            problems.append(f"{path}.{k.name}: only allowed with {needed} {on}")
    return problems


def device_problems(config: Any, where: Where) -> list[str]:
    """The fields of ``config`` whose value cannot run on this model, device or machine."""
    problems: list[str] = []
    for k in registry(type(config)):
        value = getattr(config, k.name)
        if k.value_problem is not None and (problem := k.value_problem(value, where)):
            problems.append(f"config.{k.name}: {problem}")
        if value != k.default:
            problems += [
                f"config.{k.name}: {problem}"
                for condition in k.runs
                if (problem := condition.problem(k.name, where)) is not None
            ]
    return problems


# -- what the process applies ----------------------------------------------------------------


def env_settings(cls: type | None = None) -> tuple[tuple[KnobDef, EnvSetting], ...]:
    """Each knob that sets an environment variable, with its setting, in field order."""
    return tuple((k, k.env) for k in registry(cls or _default()) if k.env is not None)


def environment(config: Any, env: Mapping[str, str], *, read: str | None = None) -> dict[str, str]:
    """The variables of ``env`` that ``config``'s knobs set (only those read at ``read``:
    ``"torch loads"`` or ``"CUDA starts"``; None: all), with the values it runs with: a
    knob that is on sets its variable, one that is off leaves it as it is."""
    out: dict[str, str] = {}
    for k, setting in env_settings(type(config)):
        if (read is None or setting.read == read) and getattr(config, k.name):
            current = out.get(setting.var, env.get(setting.var))
            out[setting.var] = setting.wanted(current)
    return out


def backend_settings(config: Any, *, cuda: bool) -> list[tuple[BackendFlag, Any]]:
    """The torch flags ``config`` decides on this device (``cuda``), each with its setting,
    in field order."""
    return [
        (flag, flag.setting(getattr(config, k.name)))
        for k in registry(type(config))
        for flag in k.backend
        if cuda or not flag.cuda
    ]


# -- what is generated ------------------------------------------------------------------------


def export_names(framework: str, cls: type | None = None) -> dict[str, str | None]:
    """Each knob's name in ``framework``'s settings (one of ``EXPORT_FRAMEWORKS``; None:
    the format cannot carry it), for ``cls`` (default: the ``default_config`` class)."""
    if framework not in EXPORT_FRAMEWORKS:
        raise ValueError(
            f"framework: expected one of {', '.join(EXPORT_FRAMEWORKS)}; got {framework!r}"
        )
    return {k.name: k.exports.get(framework) for k in registry(cls or _default())}


def _doc_type(k: KnobDef) -> str:
    if k.doc_type is not None:
        return k.doc_type
    if k.is_bool:
        kind = "true/false"
    elif k.choices is not None:
        kind = "one of " + ", ".join(f"`{c}`" for c in k.choices)
    elif k.high is not None:
        kind = f"integer {k.low or 0} to {k.high}" + (", or null" if k.type == int | None else "")
    else:
        kind = "integer > 0" + (", or null" if k.type == int | None else "")
    if k.required:
        return f"{kind}, required"
    text = "null" if k.default is None else describe_value(k.default)
    if k.choices is not None:
        text = f"`{text}`"
    return f"{kind}; default {text}"


def docs_table(cls: type | None = None) -> str:
    """The docs' table of the config's fields (docs/preset-format.md, ``config``)."""
    lines = ["| field | type | meaning | example |", "|---|---|---|---|"]
    knobs = registry(cls or _default())
    lines += [
        f"| `{k.name}` | {_doc_type(k)} | {k.doc}{k.env_doc()} | {k.example} |" for k in knobs
    ]
    return "\n".join(lines) + "\n"


def describe_value(value: Any) -> str:
    """A knob value as a user types it (``true``, ``none``, ``bf16``)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float, str)) else show(value)
