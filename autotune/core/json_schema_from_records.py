"""JSON Schema from the validator's records, so an editor can check a file as it is typed.

A record of :mod:`autotune.core.validator` (a keyword-only dataclass, its annotations and its
range rules) already says everything a JSON Schema (draft 2020-12) needs: the types, the
allowed values, which keys are required, which are unknown. :func:`json_schema` reads it
from there, so the schema cannot say something the validator does not.

The validator stays the authority: a rule the schema cannot express (a cross-field check,
a pattern written as code) is left out, so the schema accepts a little more than the
validator does, never less. A field's ``metadata["help"]`` becomes its description, and a
metadata value with a ``json_schema()`` method (a knob's registry entry) adds what it says:
allowed values, bounds, a description.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from autotune.core.validator import (
    Bound,
    below_one,
    field_hints,
    fraction,
    non_negative,
    positive,
)

__all__ = ["DRAFT", "json_schema"]

DRAFT = "https://json-schema.org/draft/2020-12/schema"

# The range rules a schema can say (and every ``Bound``); any other rule is left to the
# validator.
_RULE_BOUNDS: dict[Callable[[Any], str | None], dict[str, float]] = {
    positive: {"exclusiveMinimum": 0},
    non_negative: {"minimum": 0},
    fraction: {"minimum": 0, "maximum": 1},
    below_one: {"minimum": 0, "exclusiveMaximum": 1},
}

_SCALARS: dict[Any, dict[str, Any]] = {
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    str: {"type": "string"},
    # YAML reads an unquoted timestamp as a date-time; the validators accept both forms.
    _dt.datetime: {"type": "string", "format": "date-time"},
    Any: {},
}


def json_schema(
    cls: type[Any], *, title: str | None = None, required: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The JSON Schema of the record ``cls``, nested records inlined under ``$defs``;
    ``required`` names root fields a file must hold although they have defaults (as
    ``build(..., required=...)`` does)."""
    defs: dict[str, dict[str, Any]] = {}
    root = _record(cls, defs)
    schema: dict[str, Any] = {"$schema": DRAFT}
    if title:
        schema["title"] = title
    schema.update(defs.pop(root))
    if required:
        fields = [f.name for f in dataclasses.fields(cls)]
        needed = {*schema.get("required", []), *required}
        schema["required"] = [name for name in fields if name in needed]
    if defs:
        schema["$defs"] = dict(sorted(defs.items()))
    return schema


def _record(cls: type[Any], defs: dict[str, dict[str, Any]]) -> str:
    """Put ``cls``'s schema into ``defs`` (once) and return its name there."""
    name = cls.__name__
    if name in defs:
        return name
    defs[name] = {}  # reserved first: a record may refer to itself
    hints = field_hints(cls)
    rules: Mapping[str, Any] = getattr(cls, "_rules", {})
    properties: dict[str, Any] = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        prop = _type(hints[f.name], defs)
        rule = rules.get(f.name)
        if isinstance(rule, Bound):
            bounds: dict[str, float] | None = rule.json_schema()
        else:
            bounds = _RULE_BOUNDS.get(rule)  # type: ignore[arg-type]
        if bounds:
            prop = _bounded(prop, bounds)
        for meta in f.metadata.values():  # a registry entry may say more (a knob's choices)
            if callable(getattr(meta, "json_schema", None)):
                prop = _merged(prop, meta.json_schema())
        if f.metadata.get("help"):
            prop = {**prop, "description": f.metadata["help"]}
        properties[f.name] = prop
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
    entry: dict[str, Any] = {"type": "object", "properties": properties}
    if cls.__doc__ and not cls.__doc__.startswith(f"{name}("):
        entry["description"] = " ".join(cls.__doc__.split())
    if required:
        entry["required"] = required
    entry["additionalProperties"] = False
    defs[name] = entry
    return name


def _merged(prop: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``prop`` narrowed by ``extra``: an ``enum`` replaces the type (its values are typed),
    bounds go on the numbers (inside ``X | None`` too), other keys are added."""
    extra = dict(extra)
    if "enum" in extra and "anyOf" in prop:
        nullable = {"type": "null"} in prop["anyOf"]
        return {"enum": [*extra.pop("enum"), *([None] if nullable else [])], **extra}
    if "enum" in extra:
        return {"enum": extra.pop("enum"), **extra}
    bounds: dict[str, float] = {k: extra.pop(k) for k in ("minimum", "maximum") if k in extra}
    return {**(_bounded(prop, bounds) if bounds else prop), **extra}


def _bounded(prop: dict[str, Any], bounds: dict[str, float]) -> dict[str, Any]:
    """``prop`` with a range rule's bounds on its numbers (inside ``X | None`` too)."""
    if prop.get("type") in ("integer", "number"):
        return {**prop, **bounds}
    if "anyOf" in prop:
        return {**prop, "anyOf": [_bounded(p, bounds) for p in prop["anyOf"]]}
    return prop


def _type(tp: Any, defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The schema of one annotation."""
    origin = typing.get_origin(tp)
    if tp in _SCALARS:
        return dict(_SCALARS[tp])
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_type(a, defs) for a in typing.get_args(tp)]}
    if tp is type(None):
        return {"type": "null"}
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin in (dict, Mapping) or tp in (dict, Mapping):
        return {"type": "object"}
    if origin in (list, tuple):
        return _sequence(tp, defs)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{_record(tp, defs)}"}
    raise TypeError(f"no JSON Schema for {tp!r}")  # a new field type: teach it here


def _sequence(tp: Any, defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list or (len(args) == 2 and args[1] is Ellipsis):
        return {"type": "array", "items": _type(args[0], defs) if args else {}}
    return {
        "type": "array",
        "prefixItems": [_type(a, defs) for a in args],
        "minItems": len(args),
        "maxItems": len(args),
    }
