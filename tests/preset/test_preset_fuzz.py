"""Malformed presets, generated: whatever is wrong, loading gives a PresetError naming the
field (never another exception), and `autotune presets show` exits 2 with no traceback."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_presets import make_preset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.config.train_config import TrainConfig
from autotune.core.errors import PresetError
from autotune.preset import (
    Baseline,
    Fingerprint,
    Measured,
    ModelRef,
    SearchSummary,
    Task,
    TrainingDefaults,
    load_preset,
    preset_from_dict,
    preset_to_dict,
)

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
VALID = preset_to_dict(make_preset())
FREE_FORM = ("model.args", "config.knobs", "baseline.config.knobs")  # any key is allowed


def leaves(data: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Paths of every scalar (or empty mapping) in ``data``."""
    if isinstance(data, dict) and data:
        out = []
        for key, value in data.items():
            out += leaves(value, (*prefix, key))
        return out
    return [prefix]


LEAVES = [p for p in leaves(VALID) if not ".".join(p).startswith("model.args.")]
SECTIONS: dict[tuple[str, ...], Any] = {  # path -> dataclass, for required fields and unknown keys
    (): None,
    ("model",): ModelRef,
    ("task",): Task,
    ("config",): TrainConfig,
    ("measured",): Measured,
    ("baseline",): Baseline,
    ("baseline", "config"): TrainConfig,
    ("search",): SearchSummary,
    ("fingerprint",): Fingerprint,
    ("training",): TrainingDefaults,
}
REQUIRED = [("schema_version",), ("name",), ("created",)] + [
    (*path, f.name)
    for path, cls in SECTIONS.items()
    if cls is not None
    for f in dataclasses.fields(cls)
    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
]
REQUIRED += [(name,) for name in ("model", "task", "config", "measured", "fingerprint")]


def not_a_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return True
    return False


junk_containers = st.one_of(
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers())
)


def wrong_value(current: Any, path: tuple[str, ...]) -> st.SearchStrategy[Any]:
    """Values of a type the field at ``path`` (now holding ``current``) cannot take."""
    dotted = ".".join(path)
    if any(dotted.startswith(f"{free}.") for free in FREE_FORM):
        return st.lists(st.integers(), max_size=3)  # knob values must be scalars
    if isinstance(current, bool):
        return st.one_of(st.integers(), st.text(max_size=10), st.floats(), junk_containers)
    if isinstance(current, int):
        return st.one_of(st.booleans(), st.floats(), st.text(max_size=10), junk_containers)
    if isinstance(current, float):
        return st.one_of(
            st.booleans(),
            st.text(max_size=10).filter(not_a_number),
            st.sampled_from([float("nan"), float("inf"), float("-inf")]),
            junk_containers,
        )
    if isinstance(current, str):
        return st.one_of(st.integers(), st.floats(), st.booleans(), junk_containers)
    if isinstance(current, dict):  # an empty mapping: model.args, knobs
        return st.one_of(st.lists(st.integers(), min_size=1, max_size=3), st.integers())
    return junk_containers  # a null that may hold a number, a string or a mapping


def set_path(data: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


@st.composite
def wrongly_typed(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    data = copy.deepcopy(VALID)
    path = draw(st.sampled_from(LEAVES))
    current = data
    for key in path:
        current = current[key]
    set_path(data, path, draw(wrong_value(current, path)))
    return data, ".".join(path)


@FUZZ
@given(case=wrongly_typed())
def test_a_wrongly_typed_field_is_a_preset_error_naming_it(
    case: tuple[dict[str, Any], str],
) -> None:
    data, path = case
    with pytest.raises(PresetError) as info:
        preset_from_dict(data)
    assert path in str(info.value)


WRONG_OF_EACH_KIND: dict[
    type, list[Any]
] = {  # one value of every kind a field of this type cannot take
    bool: [7, "junk", 2.5, [1], {"a": 1}],
    int: [True, 2.5, "junk", [1], {"a": 1}],
    float: [True, "junk", float("nan"), float("inf"), [1], {"a": 1}],
    str: [7, 2.5, True, [1], {"a": 1}],
    dict: [[1], 7, "junk"],
    type(None): [[1], {"a": 1}],
}


@pytest.mark.parametrize("path", LEAVES, ids=".".join)
def test_every_field_rejects_every_wrong_kind_of_value(path: tuple[str, ...]) -> None:
    """The exhaustive companion of the generated test above: every field, every kind."""
    current: Any = VALID
    for key in path:
        current = current[key]
    dotted = ".".join(path)
    free = any(dotted.startswith(f"{f}.") for f in FREE_FORM)
    candidates: list[Any] = [[1], {"a": 1}] if free else WRONG_OF_EACH_KIND[type(current)]
    for value in candidates:
        data = copy.deepcopy(VALID)
        set_path(data, path, value)
        with pytest.raises(PresetError) as info:
            preset_from_dict(data)
        assert dotted in str(info.value), value


@FUZZ
@given(path=st.sampled_from(REQUIRED))
def test_a_deleted_required_field_is_a_preset_error(path: tuple[str, ...]) -> None:
    data = copy.deepcopy(VALID)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    with pytest.raises(PresetError) as info:
        preset_from_dict(data)
    assert ".".join(path) in str(info.value) and "missing" in str(info.value)


@FUZZ
@given(
    where=st.sampled_from(list(SECTIONS)),
    key=st.one_of(st.text(min_size=1, max_size=12), st.integers(), st.booleans()),
)
def test_an_unknown_key_is_a_preset_error(where: tuple[str, ...], key: Any) -> None:
    data = copy.deepcopy(VALID)
    section = data
    for name in where:
        section = section[name]
    if key in section:
        return
    section[key] = 1
    with pytest.raises(PresetError, match="unknown field"):
        preset_from_dict(data)


@FUZZ
@given(content=st.binary(max_size=300))
def test_junk_bytes_are_a_preset_error(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "junk.yaml"
    path.write_bytes(content)
    with pytest.raises(PresetError):
        load_preset(path)


@FUZZ
@given(content=st.text(max_size=300))
def test_junk_text_is_a_preset_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "junk.yaml"
    path.write_text(content, encoding="utf-8", errors="surrogatepass")
    with pytest.raises(PresetError):
        load_preset(path)


plain_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@FUZZ
@given(data=plain_data)
def test_random_yaml_is_a_preset_error(tmp_path: Path, data: Any) -> None:
    path = tmp_path / "random.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PresetError):
        load_preset(path)


@FUZZ
@given(
    data=st.dictionaries(st.sampled_from(list(VALID)), plain_data, min_size=1, max_size=len(VALID))
)
def test_random_values_under_the_real_keys_are_a_preset_error(data: dict[str, Any]) -> None:
    with pytest.raises(PresetError):
        preset_from_dict(data)


TAGS = [
    '!!python/object/apply:os.system ["touch {marker}"]',
    '!!python/object/apply:subprocess.check_call [["touch", "{marker}"]]',
    '!!python/object/new:os.system ["touch {marker}"]',
    "!!python/object:argparse.Namespace {{a: 1}}",
    "!!python/name:os.system",
    "!!python/module:os",
    "!!python/tuple [1, 2]",
    "!!binary aGVsbG8=",
    "!!set {{a: null}}",
    "!custom value",
]


@FUZZ
@given(path=st.sampled_from(LEAVES), tag=st.sampled_from(TAGS))
def test_yaml_tags_are_refused_and_never_run(
    tmp_path: Path, path: tuple[str, ...], tag: str
) -> None:
    marker = tmp_path / "pwned"
    data = copy.deepcopy(VALID)
    set_path(data, path, "__TAG__")
    text = yaml.safe_dump(data, sort_keys=False).replace("__TAG__", tag.format(marker=marker), 1)
    preset_file = tmp_path / "tagged.yaml"
    preset_file.write_text(text)
    with pytest.raises(PresetError):
        load_preset(preset_file)
    assert not marker.exists()


malformed_files = st.one_of(
    st.binary(max_size=200),
    plain_data.map(lambda d: yaml.safe_dump(d).encode()),
    wrongly_typed().map(lambda case: yaml.safe_dump(case[0]).encode()),
    st.sampled_from(TAGS).map(lambda t: f"schema_version: {t.format(marker='x')}\n".encode()),
)


@settings(FUZZ, max_examples=30)
@given(content=malformed_files)
def test_presets_show_exits_2_without_a_traceback(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    result = CliRunner().invoke(app, ["presets", "show", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.output.startswith("error: ")
    assert not isinstance(result.exception, (TypeError, ValueError, KeyError, AttributeError))
