"""The examples of the docs' "Use the preset in your trainer" page, run as a user would: a
preset exported with `autotune presets export`, then the example script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fake_presets import make_config, make_preset
from typer.testing import CliRunner

from autotune.cli.main import app
from autotune.preset import TrainingDefaults, save_preset

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run(script: str, *args: str, cwd: Path) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=400,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture
def preset_file(tmp_path: Path) -> Path:
    """A short CPU preset: micro-batch 8 x 2, one worker, 3 steps."""
    preset = make_preset(
        config=make_config(micro_batch=8, grad_accum=2, num_workers=1, knobs={}),
        task=make_preset().task.__class__(seq_len=64, global_batch=16),
        training=TrainingDefaults(max_steps=3, warmup_steps=1, log_interval=1),
    )
    return save_preset(preset, tmp_path / "best.yaml")


def export(preset: Path, fmt: str) -> Path:
    target = preset.parent / f"{fmt}.yaml"
    out = CliRunner().invoke(
        app, ["presets", "export", str(preset), "--format", fmt, "--output", str(target)]
    )
    assert out.exit_code == 0, out.output
    return target


@pytest.mark.slow
def test_hf_trainer_example(preset_file: Path) -> None:
    pytest.importorskip("transformers")
    run("hf_trainer.py", str(export(preset_file, "hf")), cwd=preset_file.parent)
    assert (preset_file.parent / "hf_run").is_dir()


@pytest.mark.slow
def test_lightning_example(preset_file: Path) -> None:
    pytest.importorskip("lightning")
    run("lightning_trainer.py", str(export(preset_file, "lightning")), cwd=preset_file.parent)


def test_own_loop_example(preset_file: Path) -> None:
    out = run("own_loop.py", str(preset_file), cwd=preset_file.parent)
    assert re.search(r"step 0: loss \d", out) and "step 15:" in out


@pytest.mark.slow
def test_tune_example(tmp_path: Path) -> None:
    out = run("tune_in_a_script.py", cwd=tmp_path)
    assert "x the naive config; preset in tuned.yaml" in out
    assert (tmp_path / "tuned.yaml").is_file()


@pytest.mark.parametrize(
    ("name", "page"),
    [
        ("hf_trainer.py", "exports.md"),
        ("lightning_trainer.py", "exports.md"),
        ("own_loop.py", "exports.md"),
        ("tune_in_a_script.py", "exports.md"),
        ("vision_model.py", "models.md"),
        ("my_model.py", "models.md"),
    ],
)
def test_the_docs_show_the_tested_file(name: str, page: str) -> None:
    text = (ROOT / "docs" / page).read_text()
    body = (EXAMPLES / name).read_text()
    assert body.strip() in text, f"docs/{page} does not show examples/{name} as it is"
