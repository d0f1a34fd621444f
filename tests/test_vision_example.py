"""examples/vision_model.py: a model whose size is an image side, fed by its own Dataset."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.burst.supervisor import run_burst
from autotune.cli.main import app
from autotune.config.train_config import TrainConfig
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


def test_train_runs_on_its_own_pipeline_and_resumes(tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "run"
    base = ["train", "--model", REF, "--trust-model", "--out", str(out)]
    base += ["--set", "config.seq_len=32", "--set", "config.micro_batch=16"]
    first = runner.invoke(app, [*base, "--max-steps", "2"])
    assert first.exit_code == 0, first.output
    assert "pipeline (data_fn): 512 samples, 461 to train on, the last 51" in first.output
    assert "image 32" in first.output and "seq_len" not in first.output
    again = runner.invoke(app, [*base, "--max-steps", "3", "--resume", "auto"])
    assert again.exit_code == 0, again.output
    assert "step 3/3" in again.output
    assert sorted(p.name for p in out.glob("ckpt-*.pt"))[-1] == "ckpt-step00000003.pt"


def test_train_refuses_data_for_a_model_that_reads_its_own(tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text("some text\n" * 100)
    result = CliRunner().invoke(
        app, ["train", "--model", REF, "--trust-model", "--data", str(text), "--max-steps", "1"]
    )
    assert result.exit_code == 2, result.output
    assert "reads its own data (its spec's data_fn), so --data is not used" in result.output
    assert "Traceback" not in result.output


def test_bench_names_the_image_side() -> None:
    args = ["bench", "--model", REF, "--seq-len", "32", "--steps", "1", "--warmup", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "image 32," in result.output and "seq 32" not in result.output
