"""Typed records from plain data: the one validator behind every file autotune reads.

A record is a keyword-only dataclass; its annotations give each field's type and a rule
per field gives its range. :func:`build` turns a mapping (from YAML or JSON) into the
record and :class:`Section` checks every construction, in both cases reporting every
problem at once, each with its path (``config.precision: expected one of fp32, tf32,
bf16, fp16; got 'fp8'``), so one error lists all that is wrong with a file.

Types understood: ``bool``, ``int``, ``float`` (finite; the text ``3e-4`` too, which YAML
1.1 reads as a string), ``str``, ``X | None``, ``Literal[...]``, ``dict``/``Mapping``
(plain data of a sane size), ``list[X]``, ``tuple[X, ...]``, ``tuple[X, Y]``, nested
dataclasses, and any other type through a converter the caller supplies.

This module knows no particular record (presets, configs and hardware profiles use it)
and imports nothing heavy.

It also holds the bounds of numbers (:class:`Bound`: seeds, counts, sizes, processes, and
durations): every number a user gives, by a flag, a keyword argument or a file, is checked
against one of them, declared beside its field, before any process starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import reprlib
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from autotune.core.errors import ConfigError

__all__ = [
    "BAD",
    "COUNT",
    "MAX_INT",
    "MAX_PROCESSES",
    "MAX_SECONDS",
    "MAX_SEED",
    "MAX_SIZE",
    "PROCESSES",
    "SEED",
    "SIZE",
    "Bound",
    "Converter",
    "Rule",
    "Section",
    "below_one",
    "bound_problems",
    "bounded",
    "build",
    "convert",
    "describe",
    "did_you_mean",
    "duration_problem",
    "field_bound_problems",
    "field_hints",
    "fraction",
    "join",
    "key_problems",
    "key_text",
    "non_empty",
    "non_negative",
    "plain_copy",
    "plain_data_problem",
    "positive",
    "show",
    "type_name",
]

MAX_NESTING = 32  # how deep free-form data (a model's args) may nest
MAX_NODES = 10_000  # how many values free-form data may hold
MAX_INT = 2**63 - 1  # the largest integer a field takes (a 64-bit count): more is no count
MAX_SEED = 2**32 - 1  # numpy's legacy seeding (np.random.seed) takes no larger seed
MAX_SIZE = 2**31 - 1  # a batch or a length: two of them multiply within a 64-bit count
MAX_PROCESSES = 1024  # processes one config starts on one machine (DataLoader workers, ranks)
MAX_SECONDS = 365 * 86_400.0  # a time limit of a year: more is no limit (threads take ~292 y)

BAD: Any = object()  # marks a value that failed validation (its problem is already recorded)
_FLOAT_TEXT = re.compile(r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$")

Rule = Callable[[Any], "str | None"]
"""A range check: the problem with a (well-typed) value, without its path, or None."""

Converter = Callable[[Any, str, list[str]], Any]
"""``(value, path, problems)`` -> the value, or ``BAD`` with its problems recorded."""


def did_you_mean(name: str, choices: list[str] | tuple[str, ...]) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to ``name``, or ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- how values read in a message -------------------------------------------------------------


def _make_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxlist, short.maxdict, short.maxtuple, short.maxset = 2, 4, 4, 4, 4
    short.maxstring, short.maxother, short.maxlong = 50, 50, 40
    return short


_REPR = _make_repr()


def show(value: Any) -> str:
    """A short repr of a bad value for an error message (bounded, even for a YAML "billion
    laughs" structure of nested aliases)."""
    text = _REPR.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def key_text(key: Any) -> str:
    """A mapping key as it reads in a path."""
    text = str(key) if isinstance(key, (str, int, float, bool)) or key is None else show(key)
    return text if len(text) <= 40 else text[:37] + "..."


def join(path: str, name: str) -> str:
    """``path.name``, or ``name`` at the root."""
    return f"{path}.{name}" if path else name


def type_name(value: Any) -> str:
    """What a value is, in YAML's words (``a mapping``, ``true/false``)."""
    return {
        type(None): "null",
        bool: "true/false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }.get(type(value), type(value).__name__)


def describe(tp: Any) -> str:
    """How a type reads in an error message."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        parts = [describe(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if origin is Literal:
        return "one of " + ", ".join(str(a) for a in typing.get_args(tp))
    if origin in (dict, Mapping):
        return "a mapping"
    if origin in (list, tuple):
        return "a list"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(
        tp, "a mapping"
    )


# -- free-form data -------------------------------------------------------------------------


def plain_data_problem(value: Any) -> str | None:
    """Why ``value`` is not plain YAML data (scalars, lists, string-keyed mappings) of a
    sane size, or None where it is."""
    budget = [MAX_NODES]

    def walk(item: Any, depth: int) -> str | None:
        budget[0] -= 1
        if budget[0] < 0:
            return f"more than {MAX_NODES} values (YAML aliases nested too deep?)"
        if depth > MAX_NESTING:
            return f"nested more than {MAX_NESTING} levels deep"
        if item is None or isinstance(item, (bool, int, str)):
            return None
        if isinstance(item, float):
            return None if math.isfinite(item) else f"not a finite number: {item!r}"
        if isinstance(item, (list, tuple)):
            children = list(item)
        elif isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    return f"keys must be strings, got {show(key)}"
            children = list(item.values())
        else:
            return f"not plain data (a {type(item).__name__})"
        for child in children:
            problem = walk(child, depth + 1)
            if problem:
                return problem
        return None

    return walk(value, 0)


def plain_copy(value: Any) -> Any:
    """A deep copy with tuples turned into lists, as YAML would give them back."""
    if isinstance(value, Mapping):
        return {k: plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_copy(v) for v in value]
    return value


# -- one value against its annotation ---------------------------------------------------------


def convert(
    value: Any,
    tp: Any,
    path: str,
    problems: list[str],
    *,
    converters: Mapping[Any, Converter] | None = None,
    ignore_unknown: bool = False,
) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (normalised) or ``BAD``.

    ``converters`` maps a type to the function that reads it (checked before anything
    else); ``ignore_unknown`` lets nested dataclasses skip keys they do not have.
    """
    options: dict[str, Any] = {"converters": converters, "ignore_unknown": ignore_unknown}
    origin = typing.get_origin(tp)
    if converters and tp in converters:
        return converters[tp](value, path, problems)
    if origin in (typing.Union, types.UnionType):
        return _convert_optional(value, tp, path, problems, options)
    if origin is Literal:
        allowed = typing.get_args(tp)
        if any(isinstance(value, type(a)) and value == a for a in allowed):
            return value
        problems.append(f"{path}: expected {describe(tp)}; got {show(value)}")
        return BAD
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            problems.append(f"{path}: expected a mapping; got {show(value)}")
            return BAD
        problem = plain_data_problem(value)
        if problem:
            problems.append(f"{path}: {problem}")
            return BAD
        return plain_copy(value)
    if origin in (list, tuple):
        return _convert_sequence(value, tp, path, problems, options)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        return build(tp, value, path, problems, **options)
    if tp in (bool, int, float, str):
        return _convert_scalar(value, tp, path, problems)
    raise TypeError(f"no validation for {tp!r} at {path}")  # pragma: no cover - a new field type


def _convert_optional(
    value: Any, tp: Any, path: str, problems: list[str], options: dict[str, Any]
) -> Any:
    if value is None:
        return None
    (inner,) = [a for a in typing.get_args(tp) if a is not type(None)]
    inner_problems: list[str] = []
    result = convert(value, inner, path, inner_problems, **options)
    wrong_type = f"{path}: expected {describe(inner)}; got "
    if inner_problems and inner_problems[0].startswith(wrong_type):
        inner_problems = [f"{path}: expected {describe(tp)}; got {show(value)}"]
    problems.extend(inner_problems)
    return result


def _convert_sequence(
    value: Any, tp: Any, path: str, problems: list[str], options: dict[str, Any]
) -> Any:
    if not isinstance(value, (list, tuple)):
        problems.append(f"{path}: expected a list; got {show(value)}")
        return BAD
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list or (len(args) == 2 and args[1] is Ellipsis):
        hints = [args[0] if args else Any] * len(value)
    elif len(value) == len(args):
        hints = list(args)
    else:
        problems.append(f"{path}: expected {len(args)} items; got {show(value)}")
        return BAD
    items = [
        convert(item, hint, f"{path}[{i}]", problems, **options) if hint is not Any else item
        for i, (item, hint) in enumerate(zip(value, hints, strict=True))
    ]
    if any(item is BAD for item in items):
        return BAD
    return items if typing.get_origin(tp) is list else tuple(items)


def _convert_scalar(value: Any, tp: type, path: str, problems: list[str]) -> Any:
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) <= MAX_INT:
                return value
            problems.append(f"{path}: expected an integer of at most {MAX_INT}; got {show(value)}")
            return BAD
    elif tp is float:
        number: float | None = None
        try:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                number = float(value)
            elif isinstance(value, str) and _FLOAT_TEXT.match(value):
                number = float(value)  # YAML 1.1 reads `3e-4` as a string; accept it as a number
        except OverflowError:  # an integer too large for a float: 1000...0 (400 digits)
            number = math.inf
        if number is not None:
            if math.isfinite(number):
                return number
            problems.append(f"{path}: expected a finite number; got {show(value)}")
            return BAD
    elif isinstance(value, str):
        return value
    problems.append(f"{path}: expected {describe(tp)}; got {show(value)}")
    return BAD


# -- records ---------------------------------------------------------------------------------

_HINTS: dict[type, dict[str, Any]] = {}


def field_hints(cls: type) -> dict[str, Any]:
    """The resolved field annotations of a dataclass (cached)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def key_problems(
    cls: type[Any],
    data: Mapping[Any, Any],
    path: str,
    *,
    required: tuple[str, ...] = (),
    ignore_unknown: bool = False,
) -> list[str]:
    """What is wrong with the keys of ``data`` as fields of the dataclass ``cls``: unknown
    keys (with a did-you-mean, unless ``ignore_unknown``) and missing required fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    problems: list[str] = []
    for key in data:
        if not ignore_unknown and (not isinstance(key, str) or key not in fields):
            where = join(path, key_text(key))
            problems.append(f"{where}: unknown field{did_you_mean(key_text(key), list(fields))}")
    for name, f in fields.items():
        optional = f.default is not dataclasses.MISSING or (
            f.default_factory is not dataclasses.MISSING
        )
        if name not in data and (not optional or name in required):
            problems.append(f"{join(path, name)}: missing required field")
    return problems


def build(
    cls: type[Any],
    data: Any,
    path: str,
    problems: list[str],
    *,
    required: tuple[str, ...] = (),
    converters: Mapping[Any, Converter] | None = None,
    ignore_unknown: bool = False,
) -> Any:
    """Build the dataclass ``cls`` from plain data, recording every problem under ``path``.

    Unknown keys are problems (with a did-you-mean) unless ``ignore_unknown``; a field
    without a default, or named in ``required``, must be there. A :class:`Section` checks
    its fields with its own rules and converters; any other dataclass with ``converters``.
    Returns the record, or ``BAD`` with every problem appended to ``problems``.
    """
    if not isinstance(data, Mapping):
        problems.append(f"{path}: expected a mapping; got {show(data)}")
        return BAD
    is_section = issubclass(cls, Section)
    if is_section:
        data = cls._prepare(data)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = field_hints(cls)
    local = key_problems(cls, data, path, required=required, ignore_unknown=ignore_unknown)
    kwargs: dict[str, Any] = {}
    for name in fields:
        if name in data:
            where = join(path, name)
            if is_section:
                value = cls._check_field(name, data[name], hints[name], where, local)
            else:
                value = convert(
                    data[name],
                    hints[name],
                    where,
                    local,
                    converters=converters,
                    ignore_unknown=ignore_unknown,
                )
            if value is not BAD:
                kwargs[name] = value
    if local:
        problems.extend(local)
        return BAD
    try:
        return cls(**kwargs)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return BAD


class Section:
    """A record that validates itself on every construction (subclass it with a frozen,
    keyword-only dataclass). Every problem is raised at once as ``_error``."""

    _path: ClassVar[str] = ""  # where the section sits in its file ("" for the root)
    _rules: ClassVar[Mapping[str, Rule]] = {}  # field -> range check, run after the type check
    _normalize: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}  # field -> input clean-up
    _converters: ClassVar[Mapping[Any, Converter]] = {}  # type -> how to read it
    _error: ClassVar[type[ConfigError]] = ConfigError  # raised with every problem
    _record: ClassVar[str] = "configuration"  # what the error calls the file: "invalid ..."

    @classmethod
    def _check_field(cls, name: str, value: Any, tp: Any, path: str, problems: list[str]) -> Any:
        """One field's value, normalised and type- and range-checked, or ``BAD``."""
        if name in cls._normalize:
            value = cls._normalize[name](value)
        value = convert(value, tp, path, problems, converters=cls._converters)
        rule = cls._rules.get(name)
        if value is not BAD and value is not None and rule is not None:
            message = rule(value)
            if message:
                problems.append(f"{path}: {message}")
                return BAD
        return value

    @classmethod
    def _prepare(cls, data: Mapping[Any, Any]) -> Mapping[Any, Any]:
        """Defaults that depend on other keys of the input (before validation)."""
        return data

    @classmethod
    def _error_context(cls) -> str:
        """The first line of the error: ``invalid preset training section``."""
        where = f" {cls._path} section" if cls._path else ""
        return f"invalid {cls._record}{where}"

    def __post_init__(self) -> None:
        problems: list[str] = []
        hints = field_hints(type(self))
        ok = True
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            path = join(self._path, f.name)
            value = self._check_field(f.name, getattr(self, f.name), hints[f.name], path, problems)
            if value is BAD:
                ok = False
            else:
                object.__setattr__(self, f.name, value)
        if ok:
            problems += self._cross_problems()
        if problems:
            raise self._error(problems, context=self._error_context())

    def _cross_problems(self) -> list[str]:
        """Checks that involve more than one field (run once every field is valid)."""
        return []


# -- range rules: each returns a problem (without the path) or None ----------------------------


def positive(value: Any) -> str | None:
    return None if value > 0 else f"expected a number > 0; got {show(value)}"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else f"expected a number >= 0; got {show(value)}"


def non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def fraction(value: float) -> str | None:
    return None if 0 <= value <= 1 else f"expected a number in [0, 1]; got {show(value)}"


def below_one(value: float) -> str | None:
    return None if 0 <= value < 1 else f"expected a number in [0, 1); got {show(value)}"


# -- bounds of numbers: what each kind of number may be, and why it ends there ------------------


@dataclass(frozen=True)
class Bound:
    """The whole numbers one kind of value may be: ``low`` to ``high``; ``why`` says what
    the upper end protects (numpy's seeding, a 64-bit count). A ``Rule`` too (a Section's
    ``_rules`` take one), and a field's metadata (``bounded``), which the JSON Schema reads."""

    low: int
    high: int
    why: str

    def wanted(self, value: Any) -> str | None:
        """What ``value`` must be where it is not in range (``a positive integer``, ``an
        integer of at most 4294967295 (numpy's seeding takes no larger seed)``); None where
        it is. ``True`` and ``1.0`` are no integers here."""
        if isinstance(value, int) and not isinstance(value, bool):
            if self.low <= value <= self.high:
                return None
            if value > self.high:
                return f"an integer of at most {self.high} ({self.why})"
        return "a positive integer" if self.low == 1 else f"an integer >= {self.low}"

    def __call__(self, value: Any) -> str | None:
        wanted = self.wanted(value)
        return None if wanted is None else f"expected {wanted}; got {show(value)}"

    def at_least(self, low: int) -> Bound:
        """The same bound from ``low`` on (``COUNT.at_least(0)``: a count that may be 0)."""
        return dataclasses.replace(self, low=low)

    def json_schema(self) -> dict[str, Any]:
        return {"minimum": self.low, "maximum": self.high}


SEED = Bound(0, MAX_SEED, "numpy's seeding takes no larger seed")
COUNT = Bound(1, MAX_INT, "a 64-bit count")  # trials, steps, rounds, intervals
SIZE = Bound(1, MAX_SIZE, "a batch or a length: two of them multiply within a 64-bit count")
PROCESSES = Bound(1, MAX_PROCESSES, "processes of one config on one machine")


def bounded(default: Any, bound: Bound) -> Any:
    """A dataclass field of integers that ``bound`` checks (``bound_problems``); a field
    whose default is None may be None too (left out)."""
    return dataclasses.field(default=default, metadata={"bound": bound})


def bound_problems(record: Any) -> list[str]:
    """``name must be <what it must be>, got <value>`` for each field of the dataclass
    ``record`` declared with ``bounded`` whose value is out of its bound."""
    return [text for _, text in field_bound_problems(record)]


def field_bound_problems(record: Any) -> list[tuple[str, str]]:
    """``bound_problems``, each with the name of its field: ``(name, text)``."""
    problems = []
    for f in dataclasses.fields(record):
        bound, value = f.metadata.get("bound"), getattr(record, f.name)
        if bound is None or (value is None and f.default is None):
            continue
        if wanted := bound.wanted(value):
            problems.append((f.name, f"{f.name} must be {wanted}, got {show(value)}"))
    return problems


def duration_problem(seconds: float) -> str | None:
    """What is wrong with a time limit of ``seconds``: not above 0 (NaN too), or more than
    ``MAX_SECONDS`` (a year: no search or burst is meant to run longer, and select() and
    threading refuse timeouts of about 292 years); None where it is fine."""
    if not seconds > 0:
        return "a positive duration"
    if not seconds <= MAX_SECONDS:  # infinity too
        return f"a duration of at most {MAX_SECONDS / 86_400:g} days ({MAX_SECONDS:,.0f} s)"
    return None
