"""examples/vision_model.py: a model whose size is an image side, fed by its own Dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.burst import run_burst
from autotune.cli.main import app
from autotune.config import TrainConfig
from autotune.models.registry import load_model

pytestmark = pytest.mark.usefixtures("one_thread")

REF = f"{Path(__file__).resolve().parent.parent / 'examples' / 'vision_model.py'}:spec"


def test_its_size_is_an_image_side() -> None:
    spec = load_model(REF)
    assert spec.size_label(32) == "image 32"
    images, _ = spec.dataset(32)
    assert images[0]["images"].shape == (3, 32, 32)
    shown = CliRunner().invoke(app, ["models", "show", REF])
    assert shown.exit_code == 0, shown.output
    assert "image                64 (max 256" in shown.output
    assert "its own data_fn" in shown.output


def test_a_burst_reads_its_pipeline_with_workers() -> None:
    spec = load_model(REF).with_args(width=8, blocks=1)
    config = TrainConfig(micro_batch=8, grad_accum=2, seq_len=32, num_workers=2)
    result = run_burst(spec, config, steps=2, warmup=1, timeout_s=180, verify=True)
    assert result.status == "ok", result.reason
    assert result.samples_per_s is not None and result.samples_per_s > 0
