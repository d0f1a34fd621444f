"""``PresetLoop`` from a preset dict, generated (the fault suite): a shipped preset with
fields deleted, or replaced by values of every wrong type (texts where numbers go, lists
where mappings go, huge numbers), goes through ``autotune.preset.preset_from_dict`` and
``PresetLoop.from_preset``; each ends in a loop or an ``AutotuneError`` with a message,
never another exception."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from autotune.core.errors import AutotuneError
from autotune.preset import preset_from_dict
from autotune.train.loop import PresetLoop

SHIPPED = Path(__file__).resolve().parents[1] / "presets" / "cpu" / "mu.yaml"
RAW = yaml.safe_load(SHIPPED.read_text(encoding="utf-8"))


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value of ``data`` (mapping keys, list indices)."""
    found = [prefix] if prefix else []
    if isinstance(data, dict):
        for key, value in data.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found += _paths(value, (*prefix, index))
    return found


PATHS = _paths(RAW)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=64),
    st.sampled_from([2**63, -(2**63), 10**30, float("inf"), float("nan"), 1e308]),
    st.sampled_from(["", "x", "fp8", "cuda:9", "1GB", "-1", "[1, 2]", "yes"]),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-1, max_value=4), max_size=3),
    st.just({"a": 1}),
)
EDITS = st.lists(
    st.tuples(st.sampled_from(PATHS), st.one_of(st.just("delete"), VALUES)), min_size=1, max_size=4
)


def _edited(edits: list[tuple[tuple[Any, ...], Any]]) -> Any:
    data = copy.deepcopy(RAW)
    for path, value in edits:
        parent = data
        for step in path[:-1]:
            if not isinstance(parent, dict | list):
                break
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                break
        else:
            if isinstance(parent, dict) and value == "delete":
                parent.pop(path[-1], None)
            elif isinstance(parent, dict) or (
                isinstance(parent, list) and isinstance(path[-1], int) and path[-1] < len(parent)
            ):
                parent[path[-1]] = value
    return data


def test_the_shipped_preset_gives_a_loop() -> None:
    loop = PresetLoop.from_preset(preset_from_dict(RAW, source=str(SHIPPED)), device="cpu")
    assert loop.micro_batch >= 1


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(edits=EDITS, world_size=st.one_of(st.just(1), st.integers(min_value=-2, max_value=9)))
def test_any_preset_dict_gives_a_loop_or_a_clear_error(
    edits: list[tuple[tuple[Any, ...], Any]], world_size: int
) -> None:
    data = _edited(edits)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an OpenMP mismatch warns; not the point here
            preset = preset_from_dict(data, source="fuzzed.yaml")
            loop = PresetLoop.from_preset(preset, device="cpu", world_size=world_size)
    except AutotuneError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc)
        return
    assert loop.micro_batch >= 1 and loop.grad_accum >= 1
