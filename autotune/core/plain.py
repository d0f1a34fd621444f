"""Records as plain data and back: the one rule behind the records' ``to_dict``/``from_dict``.

:func:`to_plain` turns a dataclass record into JSON/YAML-safe data (nested records
recursively, tuples and lists to lists, mappings to dicts, paths to text, enums to their
value, numbers as they are); :func:`from_plain` reads such data back into the record through
the one validator (:func:`autotune.core.validator.build`), ignoring keys the record does not
have (a record written by a newer autotune still loads), turning lists back into tuples,
and raising one error that lists every problem with its path.

A record whose plain form is more than its fields (derived keys, rounding for display, a
versioned schema) keeps its own ``to_dict`` and may start from :func:`to_plain`.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any, TypeVar

from autotune.core.errors import ConfigError
from autotune.core.validator import BAD, Converter, build, show

__all__ = ["MEASURED", "from_plain", "plain_value", "to_plain"]

T = TypeVar("T")


def to_plain(record: Any) -> dict[str, Any]:
    """The fields of the dataclass ``record`` as plain data, in field order."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"to_plain needs a dataclass record, got {type(record).__name__}")
    return {f.name: plain_value(getattr(record, f.name)) for f in dataclasses.fields(record)}


def plain_value(value: Any) -> Any:
    """One value as plain data (see :func:`to_plain`); anything else is returned as is."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(value)
    if isinstance(value, enum.Enum):
        return plain_value(value.value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, Mapping):
        return {k: plain_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value


def _measured_float(value: Any, path: str, problems: list[str]) -> Any:
    """A measured figure: any number, NaN and infinities included (a diverged loss)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    problems.append(f"{path}: expected a number; got {show(value)}")
    return BAD


MEASURED: Mapping[Any, Converter] = {float: _measured_float}
"""Converters for :func:`from_plain` where a float is a measurement (NaN and inf allowed)."""


def from_plain(
    cls: type[T],
    data: Any,
    *,
    path: str = "",
    ignore_unknown: bool = True,
    required: tuple[str, ...] = (),
    converters: Mapping[Any, Converter] | None = None,
    error: type[Exception] = ConfigError,
    context: str | None = None,
) -> T:
    """The dataclass ``cls`` from plain data (what :func:`to_plain` wrote).

    Keys ``cls`` does not have are ignored unless ``ignore_unknown`` is False; a field
    without a default, or named in ``required``, must be there. Every problem, each with
    its path under ``path``, is raised at once as ``error`` (a :class:`ConfigError`
    subclass gets the list and ``context``; any other error one message).
    """
    problems: list[str] = []
    record = build(
        cls,
        data,
        path,
        problems,
        required=required,
        converters=converters,
        ignore_unknown=ignore_unknown,
    )
    if problems or record is BAD:
        what = context or f"invalid {cls.__name__} record"
        if issubclass(error, ConfigError):
            raise error(problems, context=what)
        raise error(f"{what}: " + "; ".join(problems))
    return record
