"""Presets as data, YAML and files: round trip, unreadable files, atomic saves, and the
format reference in docs/preset-format.md."""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_presets import make_preset, problems_of

from autotune.config.train_config import TrainConfig
from autotune.core import files
from autotune.core.errors import PresetError
from autotune.preset import (
    PRESET_SCHEMA_VERSION,
    Baseline,
    Fingerprint,
    Measured,
    ModelRef,
    Preset,
    SearchSummary,
    Task,
    TrainingDefaults,
    dump_preset,
    load_preset,
    preset_from_dict,
    preset_to_dict,
    save_preset,
)

# -- round trip ----------------------------------------------------------------------------


def test_save_then_load_gives_an_equal_preset(tmp_path: Path) -> None:
    preset = make_preset()
    path = save_preset(preset, tmp_path / "best.yaml")
    assert path == tmp_path / "best.yaml"
    loaded = load_preset(path)
    assert loaded == preset
    # Measured figures are kept verbatim, to the last bit.
    assert loaded.measured.tokens_per_s == 12345.678901234567
    assert loaded.model.args == {"n_layer": 2, "dims": [64, 128]}
    assert loaded.config.knobs == {"block_group": 2}


def test_dump_then_from_dict_gives_an_equal_preset() -> None:
    preset = make_preset(baseline=None, search=None, budget_bytes=None)
    text = dump_preset(preset)
    assert text.startswith("# autotune preset, schema version 2")
    assert preset_from_dict(yaml.safe_load(text)) == preset
    assert preset_from_dict(preset_to_dict(preset)) == preset


def test_to_dict_has_a_stable_key_order() -> None:
    data = preset_to_dict(make_preset())
    assert list(data) == [
        "schema_version",
        "name",
        "created",
        "model",
        "task",
        "budget_bytes",
        "config",
        "measured",
        "baseline",
        "search",
        "race",
        "fingerprint",
        "training",
        "notes",
    ]
    assert data["schema_version"] == PRESET_SCHEMA_VERSION
    assert list(data["measured"])[:2] == ["tokens_per_s", "samples_per_s"]
    # Plain data only: yaml.safe_dump accepts it.
    yaml.safe_dump(data)


def test_header_comment_cannot_inject_yaml() -> None:
    evil = "evil\nschema_version: 3\r\u2028x"
    with pytest.raises(PresetError, match=r"name: contains the control character U\+000A"):
        make_preset(name=evil)  # a name is one line: validation refuses it
    preset = make_preset()
    object.__setattr__(preset, "name", evil)  # and were one planted, the header holds
    text = dump_preset(preset)
    assert yaml.safe_load(text)["name"] == evil
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert len(header) == 4


def test_created_accepts_yaml_timestamps_and_normalises_to_utc() -> None:
    data = yaml.safe_load(dump_preset(make_preset()).replace("'2024-05-01T12:00:00Z'", "x"))
    data["created"] = dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone.utc)
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    data["created"] = "2024-05-01T12:00:00+00:00"
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    unquoted = "created: 2024-05-01T12:00:00Z\n"  # YAML reads it as a datetime
    data["created"] = yaml.safe_load(unquoted)["created"]
    assert preset_from_dict(data).created == "2024-05-01T12:00:00Z"
    data["created"] = "2024-05-01T12:00:00+02:00"
    assert any(p.startswith("created: expected an ISO 8601 UTC") for p in problems_of(data))


# -- files ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b"  \n\n# only a comment\n", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "is a binary file"),
        (b"name: caf\xe9\n", "is not UTF-8 text"),
        (b"name: [unclosed\n", "is not valid YAML"),
        (b"a: 1\n  b: 2\n", "is not valid YAML"),
        (b"!!python/object/apply:os.system ['true']\n", "YAML tag that autotune does not load"),
        (b"schema_version: !!python/name:os.system\n", "tags such as !!python/object"),
        (b"name: a\nmodel: {name: mu}\nname: b\n", "the key 'name' is written twice, line 3"),
        (b"config: {knobs: {x: 1, x: 2}}\n", "the key 'x' is written twice"),
        (b"? [a, b]\n: 1\n", "a key is a list or a mapping, line 1"),
        (b"- 1\n- 2\n", "expected a mapping of fields at the top level, got a list"),
        (b"just text\n", "expected a mapping of fields at the top level, got a string"),
        (b"schema_version: 2\n", "task: missing required field"),
    ],
)
def test_unreadable_files_give_a_preset_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(PresetError) as info:
        load_preset(path)
    assert message in str(info.value)
    assert info.value.exit_code == 2


def test_a_python_tag_is_never_executed(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f"schema_version: !!python/object/apply:os.system ['touch {marker}']\n")
    with pytest.raises(PresetError):
        load_preset(path)
    assert not marker.exists()


@pytest.mark.parametrize("target", ["model.args", "config.micro_batch", "config.knobs", "name"])
def test_a_billion_laughs_is_refused_quickly(tmp_path: Path, target: str) -> None:
    """Nested YAML aliases: 9**10 values if expanded; validation must not expand them."""
    laughs = {"l0": ["x"] * 9}
    for i in range(1, 10):
        laughs[f"l{i}"] = [laughs[f"l{i - 1}"]] * 9
    data = preset_to_dict(make_preset())
    section, _, leaf = target.rpartition(".")
    parent = data[section] if section else data
    parent[leaf] = {"deep": laughs["l9"]} if leaf == "knobs" else laughs["l9"]
    path = tmp_path / "laughs.yaml"
    path.write_text(yaml.safe_dump(data))  # anchors and aliases, so the file stays small
    assert path.stat().st_size < 10_000
    with pytest.raises(PresetError) as info:
        load_preset(path)
    assert len(str(info.value)) < 1000 and target in str(info.value)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(PresetError, match="does not exist"):
        load_preset(tmp_path / "nope.yaml")
    with pytest.raises(PresetError, match="is a directory"):
        load_preset(tmp_path)


def test_unreadable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = save_preset(make_preset(), tmp_path / "p.yaml")

    def denied(path: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files, "_open_for_reading", denied)  # root ignores chmod 0
    with pytest.raises(PresetError, match=r"cannot read preset file .*: Permission denied"):
        load_preset(path)


def test_save_preset_overwrite_flag(tmp_path: Path) -> None:
    path = save_preset(make_preset(), tmp_path / "sub" / "p.yaml")  # makes the folder
    before = path.read_text()
    with pytest.raises(PresetError, match="already exists"):
        save_preset(make_preset(name="other"), path, overwrite=False)
    assert path.read_text() == before
    save_preset(make_preset(name="other"), path)
    assert load_preset(path).name == "other"
    with pytest.raises(PresetError, match="is a directory"):
        save_preset(make_preset(), tmp_path)


def test_save_preset_replaces_a_preset_or_an_empty_file_never_another_file(
    tmp_path: Path,
) -> None:
    # save_preset(p, "c.pt") turned a checkpoint into YAML, where a search refuses the path
    checkpoint = tmp_path / "c.pt"
    checkpoint.write_bytes(b"PK\x03\x04 weights")
    with pytest.raises(PresetError, match=r"'.*c\.pt' exists and is not an autotune preset"):
        save_preset(make_preset(), checkpoint)
    assert checkpoint.read_bytes() == b"PK\x03\x04 weights"
    notes = tmp_path / "notes.yaml"
    notes.write_text("shopping: [milk]\n")
    with pytest.raises(PresetError, match="not an autotune preset"):
        save_preset(make_preset(), notes)
    empty = tmp_path / "empty.yaml"
    empty.touch()
    assert load_preset(save_preset(make_preset(name="e"), empty)).name == "e"


def test_no_clobber_save_without_hard_links(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_links(src: Any, dst: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(files.os, "link", no_links)
    path = save_preset(make_preset(), tmp_path / "p.yaml", overwrite=False)
    assert load_preset(path) == make_preset()
    with pytest.raises(PresetError, match="already exists"):
        save_preset(make_preset(name="new"), path, overwrite=False)
    assert load_preset(path).name == "mu-cpu"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_failing_dump_leaves_the_old_file_intact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def broken_dump(*args: Any, **kwargs: Any) -> str:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(yaml, "safe_dump", broken_dump)
    with pytest.raises(RuntimeError, match="disk on fire"):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


def test_a_failing_replace_leaves_the_old_file_intact_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def broken_replace(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", broken_replace)
    with pytest.raises(PresetError, match=r"cannot write preset .* No space left on device"):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


def test_an_interrupted_write_leaves_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = save_preset(make_preset(), tmp_path / "best.yaml")
    before = path.read_bytes()

    def interrupted(fd: int) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "fsync", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_preset(make_preset(name="new"), path)
    assert path.read_bytes() == before
    assert _leftovers(tmp_path) == ["best.yaml"]


# -- the format reference ------------------------------------------------------------------

DOCS = Path(__file__).resolve().parents[2] / "docs" / "preset-format.md"


def yaml_blocks() -> list[str]:
    text = DOCS.read_text()
    return [block.split("```", 1)[0] for block in text.split("```yaml\n")[1:]]


def test_the_documented_example_is_what_autotune_writes() -> None:
    *_, example = yaml_blocks()
    preset = preset_from_dict(yaml.safe_load(example), source="docs example")
    assert dump_preset(preset) == example
    documented = DOCS.read_text()
    for section, cls in [
        ("Top level", Preset),
        ("model", ModelRef),
        ("task", Task),
        ("config", TrainConfig),
        ("measured", Measured),
        ("baseline", Baseline),
        ("search", SearchSummary),
        ("fingerprint", Fingerprint),
        ("training", TrainingDefaults),
    ]:
        header = "### Top level" if cls is Preset else f"### `{section}`"
        part = documented.split(header, 1)[1].split("\n### ", 1)[0]
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` |" in part, f"{section}.{f.name} is not documented"


def test_the_documented_version_1_file_migrates() -> None:
    v1 = next(block for block in yaml_blocks() if block.startswith("schema_version: 1"))
    preset = preset_from_dict(yaml.safe_load(v1), source="docs v1 example")
    assert preset.budget_bytes == 8 * 10**9 and preset.measured.step_time_median_s == 0.455


def test_a_null_speedup_round_trips_with_its_reason(tmp_path: Path) -> None:

    from autotune.preset import Race, load_preset, save_preset

    race = Race(
        rounds=1,
        unit="tokens/s",
        winner="#3",
        speedup=None,
        speedup_interval=None,
        speedup_reason="no quiet round, and no quiet trial of both configs",
        interval_reason="1 round",
    )
    path = save_preset(make_preset(race=race), tmp_path / "p.yaml")
    loaded = load_preset(path)
    assert loaded.race == race
    assert "speedup_reason: no quiet round" in path.read_text()


HUGE = 10**400  # YAML reads 400 digits as a Python int; no float holds it


@pytest.mark.parametrize(
    "path",
    [
        ("budget_bytes",),
        ("fingerprint", "memory_bytes"),
        ("measured", "peak_memory_bytes"),
        ("measured", "tokens_per_s"),
        ("training", "lr"),
        ("baseline", "speedup"),
        ("training", "seed"),
    ],
    ids=".".join,
)
def test_a_huge_number_is_a_preset_error_not_a_traceback(
    tmp_path: Path, path: tuple[str, ...]
) -> None:
    from typer.testing import CliRunner

    from autotune.cli.main import app

    data = preset_to_dict(make_preset())
    if data.get(path[0]) is None:
        pytest.skip(f"{path[0]} is null in the fake preset")
    section = data
    for key in path[:-1]:
        section = section[key]
    section[path[-1]] = HUGE
    with pytest.raises(PresetError, match=".".join(path)):
        preset_from_dict(data)
    file = tmp_path / "huge.yaml"
    file.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    for args in (
        ["presets", "show", str(file)],
        ["presets", "export", str(file), "--format", "hf"],
    ):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert "error: invalid preset" in result.output


def test_a_seed_numpy_cannot_take_is_a_preset_error() -> None:
    data = preset_to_dict(make_preset())
    data["training"]["seed"] = 2**32
    with pytest.raises(PresetError, match=r"training\.seed"):
        preset_from_dict(data)
    data["training"]["seed"] = 2**32 - 1
    assert preset_from_dict(data).training.seed == 2**32 - 1


def test_a_version_1_budget_too_large_is_a_preset_error() -> None:
    data = {
        "schema_version": 1,
        "name": "x",
        "created": "2024-01-02T03:04:05Z",
        "model": "mu",
        "seq_len": 128,
        "global_batch": 32,
        "budget": "0.5",
        "config": {"micro_batch": 8, "grad_accum": 4, "seq_len": 128},
        "hardware": {
            "device": "cpu",
            "name": "x",
            "memory_bytes": HUGE,
            "cores": 4,
            "torch": "1",
            "autotune": "1",
            "cpu": "x",
        },
        "measured": {},
    }
    with pytest.raises(PresetError, match="budget"):
        preset_from_dict(data)
    data["budget"] = "9" * 400 + "GB"
    with pytest.raises(PresetError, match="budget"):
        preset_from_dict(data)
