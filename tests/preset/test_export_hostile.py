"""A shared preset is hostile input: whatever its strings hold (newlines, quotes, ``$(...)``,
backticks, YAML document markers, terminal escapes, Unicode line separators), every export
parses back to exactly what it means to say, and the torchrun script runs exactly one
command, the intended one."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_presets import gpu_fingerprint, make_config, make_preset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core.errors import PresetError
from autotune.core.text import control_problem
from autotune.models.registry import is_user_code
from autotune.preset import ModelRef, Preset, SearchSummary, preset_to_dict
from autotune.preset.export import EXPORT_FORMATS, export_preset

PAYLOADS = [
    "\n",
    "\r\n",
    "\n---\npush_to_hub: true\nhub_model_id: evil/model\n",
    "'",
    '"',
    "\\",
    "$(touch pwned)",
    "`touch pwned`",
    "; touch pwned;",
    "&& touch pwned",
    "| sh",
    "#",
    ": ",
    "- ",
    "---",
    "...",
    "%YAML 1.1",
    "!!python/object/apply:os.system",
    "&anchor *anchor",
    "{a: 1}",
    "[1, 2]",
    "\x1b]0;owned\x07",
    "\x1b]8;;http://evil.example\x1b\\",
    "\x1b[2J",
    "\x9b31m",
    "\x85",
    "\u2028",
    "\u2029",
    "\t",
    "\x00",
    "\x7f",
    "\ufeff",
    "\u202e",
    "é日本",
    " ",
]

hostile_text = st.lists(
    st.one_of(st.sampled_from(PAYLOADS), st.text(max_size=4)), min_size=1, max_size=6
).map("".join)


def _as_name(text: str) -> str:
    """``text`` less what validation refuses in a name (controls; blank names)."""
    kept = "".join(c for c in text if control_problem(c) is None)
    return kept if kept.strip() else f"n{kept}"


hostile_name = hostile_text.map(_as_name)


@st.composite
def hostile_presets(draw: st.DrawFn) -> Preset:
    """A preset with a hostile string in every string field that validation accepts."""
    n = hostile_name
    return make_preset(
        name=draw(n),
        model=ModelRef(name=draw(n), args={draw(n): draw(n), "dims": [draw(n), 3]}),
        config=make_config(
            precision="bf16",
            compile="default",
            activation_checkpointing=True,
            knobs={draw(n): draw(n), draw(n): 2},
        ),
        fingerprint=gpu_fingerprint(
            name=draw(n),
            cpu_model=draw(n),
            torch_version=draw(n),
            autotune_version=draw(n),
            driver_version=draw(n),
            cuda_version=draw(n),
        ),
        search=SearchSummary(
            trials_run=3,
            wall_s=1.0,
            study_name=draw(n),
            storage=draw(n),
            objective=draw(n),
            sampler=draw(n),
        ),
        notes=draw(hostile_text),  # free text: any character at all
    )


def intended_command(preset: Preset, ref: str, nproc: int = 1) -> list[str]:
    words = ["torchrun", "--standalone", "--nproc-per-node", str(nproc), "-m", "autotune"]
    words += ["train", "--preset", ref]
    return words + (["--trust-model"] if is_user_code(preset.model.name) else [])


def _check_comments(lines: list[str]) -> None:
    for line in lines:
        assert line.startswith("# "), line
        assert line.isprintable(), line


def _check_yaml_export(fmt: str, preset: Preset, text: str, data: Any) -> None:
    lines = text.split("\n")
    comments = [line for line in lines if line.startswith("#")]
    _check_comments(comments)
    assert lines[: len(comments)] == comments  # the comments head the file, nothing between
    assert yaml.safe_load(text) == data
    benign = export_preset(make_preset(config=preset.config, fingerprint=preset.fingerprint), fmt)
    assert data is not None and benign.data is not None
    assert _keys(data) == _keys(benign.data)  # exactly the intended keys


def _keys(data: Any, prefix: str = "") -> set[str]:
    if not isinstance(data, dict):
        return set()
    out = set()
    for key, value in data.items():
        out.add(prefix + key)
        out |= _keys(value, f"{prefix}{key}.")
    return out


def _run_script(text: str, argv_file: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    """Run the script with a fake ``torchrun`` (it records its arguments) and nothing else
    on the PATH: any other command would be "not found"."""
    fake = folder / "bin"
    fake.mkdir(exist_ok=True)
    torchrun = fake / "torchrun"
    torchrun.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > '{argv_file}'\n")
    torchrun.chmod(0o755)
    script = folder / "run.sh"
    script.write_text(text)
    env = {"PATH": str(fake), "HOME": str(folder)}
    return subprocess.run(
        ["/bin/bash", str(script)], env=env, cwd=folder, capture_output=True, text=True, timeout=30
    )


def _check_torchrun(preset: Preset, ref: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        script = folder / "check.sh"
        script.write_text(text)
        checked = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
        lines = [line for line in text.split("\n") if line]
        assert lines[0] == "#!/usr/bin/env bash"
        _check_comments([line for line in lines[1:] if line.startswith("#")])
        commands = [line for line in lines if not line.startswith("#")]
        assert [shlex.split(line) for line in commands] == [intended_command(preset, ref)]
        argv_file = folder / "argv"
        ran = _run_script(text, argv_file, folder)
        assert ran.returncode == 0 and ran.stderr == "", ran.stderr
        recorded = argv_file.read_bytes().decode().split("\0")[:-1]
        assert recorded == intended_command(preset, ref)[1:]
        assert sorted(os.listdir(folder)) == ["argv", "bin", "check.sh", "run.sh"]


HOSTILE = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)


@settings(max_examples=15, **HOSTILE)  # type: ignore[arg-type]
@given(preset=hostile_presets(), ref=hostile_name)
def test_every_export_of_a_hostile_preset_says_exactly_what_it_means(
    preset: Preset, ref: str
) -> None:
    says_exactly_what_it_means(preset, ref)


@pytest.mark.slow  # the same over 40 examples: 6-13 s on the 2-core CPU (a shell run each)
@settings(max_examples=40, **HOSTILE)  # type: ignore[arg-type]
@given(preset=hostile_presets(), ref=hostile_name)
def test_every_export_of_a_hostile_preset_over_more_examples(preset: Preset, ref: str) -> None:
    says_exactly_what_it_means(preset, ref)


def says_exactly_what_it_means(preset: Preset, ref: str) -> None:
    for fmt in EXPORT_FORMATS:
        exported = export_preset(preset, fmt, preset_ref=ref)
        text = exported.text
        for note in exported.unmapped:
            assert note.isprintable() and "\n" not in note
        if fmt == "json":
            assert json.loads(text) == json.loads(json.dumps(preset_to_dict(preset)))
            assert text.isascii()
        elif fmt == "deepspeed":
            assert json.loads(text) == exported.data
        elif fmt == "torchrun":
            _check_torchrun(preset, ref, text)
        elif fmt == "yaml":
            comments = [line for line in text.split("\n") if line.startswith("#")]
            _check_comments(comments)
            assert yaml.safe_load(text) == preset_to_dict(preset)
        else:
            _check_yaml_export(fmt, preset, text, exported.data)


# -- the defects this guards against, one each ----------------------------------------------


def _planted(**names: str) -> Preset:
    """A preset with names planted past validation (as a bug elsewhere might)."""
    preset = make_preset(fingerprint=gpu_fingerprint())
    for section, value in names.items():
        target = preset if section == "name" else getattr(preset, section)
        object.__setattr__(target, "name" if section != "fingerprint" else "device_name", value)
    return preset


def test_a_model_name_with_a_newline_is_refused_and_runs_nothing_if_planted() -> None:
    with pytest.raises(PresetError, match=r"model\.name: contains the control character"):
        ModelRef(name="mu\ntouch pwned")
    preset = _planted(model="mu\ntouch pwned #", fingerprint="A100\n$(touch pwned)")
    text = export_preset(preset, "torchrun", preset_ref="best.yaml").text
    _check_torchrun(preset, "best.yaml", text)


def test_a_header_newline_adds_no_key_to_the_hf_arguments() -> None:
    preset = _planted(model="mu\npush_to_hub: true\nhub_model_id: evil/model")
    for fmt in ("hf", "lightning", "accelerate"):
        exported = export_preset(preset, fmt)
        loaded = yaml.safe_load(exported.text)
        assert loaded == exported.data
        assert "push_to_hub" not in loaded and "hub_model_id" not in loaded


def test_a_torchrun_reference_with_a_newline_is_refused() -> None:
    from autotune.core.errors import UsageError

    with pytest.raises(UsageError, match="preset reference"):
        export_preset(make_preset(), "torchrun", preset_ref="best.yaml\ntouch pwned")
