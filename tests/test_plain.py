"""to_plain / from_plain: records as plain data and back (autotune.core.plain)."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml

from autotune.core.errors import ConfigError, PresetError
from autotune.core.plain import MEASURED, from_plain, plain_value, to_plain


class Color(enum.Enum):
    RED = "red"


@dataclass(frozen=True, kw_only=True)
class Inner:
    name: str
    sizes: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Outer:
    count: int
    inner: Inner
    pair: tuple[int, str] = (1, "a")
    inners: tuple[Inner, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    scale: float | None = None
    mode: Literal["a", "b"] = "a"


@dataclass(frozen=True, kw_only=True)
class Odd:
    where: Path
    color: Color
    nested: Mapping[str, Any]


def _outer() -> Outer:
    return Outer(
        count=3,
        inner=Inner(name="x", sizes=(1, 2)),
        inners=(Inner(name="y"),),
        options={"k": (1, 2), "deep": {"t": (3,)}},
        scale=0.5,
    )


def test_to_plain_is_json_and_yaml_safe_data_in_field_order() -> None:
    data = to_plain(_outer())
    assert list(data) == ["count", "inner", "pair", "inners", "options", "scale", "mode"]
    assert data == {
        "count": 3,
        "inner": {"name": "x", "sizes": [1, 2]},
        "pair": [1, "a"],
        "inners": [{"name": "y", "sizes": []}],
        "options": {"k": [1, 2], "deep": {"t": [3]}},
        "scale": 0.5,
        "mode": "a",
    }
    assert json.loads(json.dumps(data)) == data
    assert yaml.safe_load(yaml.safe_dump(data)) == data


def test_to_plain_turns_paths_and_enums_into_text() -> None:
    odd = Odd(where=Path("/tmp/run"), color=Color.RED, nested={"p": Path("a/b"), "c": [Color.RED]})
    assert to_plain(odd) == {
        "where": "/tmp/run",
        "color": "red",
        "nested": {"p": "a/b", "c": ["red"]},
    }
    assert plain_value(float("nan")) != plain_value(float("nan"))  # floats are kept as they are
    assert plain_value(None) is None


def test_to_plain_refuses_what_is_not_a_record() -> None:
    with pytest.raises(TypeError, match="dataclass record"):
        to_plain({"a": 1})
    with pytest.raises(TypeError, match="dataclass record"):
        to_plain(Outer)


def test_from_plain_reads_back_what_to_plain_wrote() -> None:
    record = _outer()
    data = json.loads(json.dumps(to_plain(record)))
    back = from_plain(Outer, data)
    assert back.inner == record.inner
    assert back.inner.sizes == (1, 2) and isinstance(back.inner.sizes, tuple)
    assert back.pair == (1, "a") and back.inners == (Inner(name="y"),)
    assert back.options == {"k": [1, 2], "deep": {"t": [3]}}  # free-form data stays plain
    assert back.scale == 0.5
    assert from_plain(Outer, {**data, "scale": None}).scale is None  # Optional


def test_from_plain_ignores_unknown_keys_unless_told() -> None:
    data = {"count": 1, "inner": {"name": "x", "future": 1}, "newer": True}
    assert from_plain(Outer, data) == Outer(count=1, inner=Inner(name="x"))
    with pytest.raises(ConfigError) as exc:
        from_plain(Outer, {"count": 1, "inner": {"name": "x"}, "cuont": 2}, ignore_unknown=False)
    assert exc.value.problems == ["cuont: unknown field (did you mean 'count'?)"]


def test_from_plain_lists_every_problem_with_its_path() -> None:
    data = {"count": "3", "inner": {"sizes": [1, "two"]}, "pair": [1], "mode": "c"}
    with pytest.raises(ConfigError) as exc:
        from_plain(Outer, data, path="rec", context="invalid record")
    assert str(exc.value).startswith("invalid record:")
    assert exc.value.problems == [
        "rec.count: expected an integer; got '3'",
        "rec.inner.name: missing required field",
        "rec.inner.sizes[1]: expected an integer; got 'two'",
        "rec.pair: expected 2 items; got [1]",
        "rec.mode: expected one of a, b; got 'c'",
    ]


def test_from_plain_needs_a_mapping_and_the_required_fields() -> None:
    with pytest.raises(ConfigError, match="expected a mapping; got"):
        from_plain(Inner, [1, 2])
    with pytest.raises(ConfigError) as exc:
        from_plain(Inner, {"name": "x"}, required=("sizes",))
    assert exc.value.problems == ["sizes: missing required field"]


def test_from_plain_raises_the_error_the_caller_passes() -> None:
    with pytest.raises(PresetError) as exc:
        from_plain(Inner, {}, error=PresetError, context="invalid preset")
    assert exc.value.problems == ["name: missing required field"]
    with pytest.raises(ValueError, match=r"^bad inner: name: expected a string; got 1$"):
        from_plain(Inner, {"name": 1}, error=ValueError, context="bad inner")


def test_measured_floats_may_be_nan_or_infinite() -> None:
    data = {"count": 1, "inner": {"name": "x"}, "scale": float("nan")}
    with pytest.raises(ConfigError, match="finite"):
        from_plain(Outer, data)
    scale = from_plain(Outer, data, converters=MEASURED).scale
    assert scale is not None and math.isnan(scale)
    with pytest.raises(ConfigError, match="scale: expected a number or null; got 'fast'"):
        from_plain(Outer, {**data, "scale": "fast"}, converters=MEASURED)
