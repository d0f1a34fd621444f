"""`autotune train` draws its loss and throughput curves into the run folder, at the end
and when a signal stops it; without matplotlib it says so in one line and trains anyway."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_lm import make_spec

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import ModelSpec
from autotune.data import TrainData, prepare_lm_data
from autotune.train.log import CURVES_FILE, write_curves
from autotune.train.trainer import Trainer, TrainResult

SEQ = 16

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TrainData:
    cache = tmp_path_factory.mktemp("cache")
    return prepare_lm_data(None, seq_len=SEQ, vocab_size=260, cache_dir=cache)


def run(
    out: Path, data: TrainData, *, spec: ModelSpec | None = None
) -> tuple[TrainResult, list[str]]:
    said: list[str] = []
    training = TrainingDefaults(
        max_steps=6,
        warmup_steps=2,
        lr=3e-3,
        log_interval=2,
        eval_interval=3,
        eval_batches=1,
        checkpoint_interval=100,
        seed=1,
    )
    config = TrainConfig(micro_batch=4, grad_accum=2, seq_len=SEQ)
    trainer = Trainer(
        spec or make_spec(), config, training, data, out, echo=said.append, tensorboard=False
    )
    return trainer.run(), said


def _png_size(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")


def test_a_run_draws_its_curves_in_the_run_folder(tmp_path: Path, data: TrainData) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    result, said = run(tmp_path, data)
    assert result.exit_code == 0
    width, height = _png_size(tmp_path / CURVES_FILE)
    assert width > 500 and height > 200
    assert not any(CURVES_FILE in line for line in said)  # no note when it worked


def test_a_run_stopped_by_a_signal_still_draws_them(tmp_path: Path, data: TrainData) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    calls = [0]
    spec = make_spec()
    loss_fn = spec.loss_fn

    def stop_in_step_3(module: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Any:
        calls[0] += 1
        if calls[0] == 5:
            os.kill(os.getpid(), signal.SIGTERM)
        return loss_fn(module, batch)

    import dataclasses

    result, _ = run(tmp_path, data, spec=dataclasses.replace(spec, loss_fn=stop_in_step_3))
    assert result.interrupted == "SIGTERM"
    _png_size(tmp_path / CURVES_FILE)


def test_without_matplotlib_a_run_says_so_in_one_line(
    tmp_path: Path, data: TrainData, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result, said = run(tmp_path, data)
    assert result.exit_code == 0 and not (tmp_path / CURVES_FILE).exists()
    notes = [line for line in said if CURVES_FILE in line]
    assert len(notes) == 1 and 'pip install "autotune-train[report]"' in notes[0]


def test_write_curves_skips_what_it_cannot_read(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('not json\n{"type": "train", "step": "x", "loss": 1}\n', encoding="utf-8")
    assert write_curves(metrics, tmp_path / "c.png") is None  # nothing to draw, no failure
    assert not (tmp_path / "c.png").exists()
    lines = [
        f'{{"type": "train", "step": {i}, "loss": {3 - i * 0.1}, "samples_per_s": 9}}'
        for i in range(5)
    ]
    metrics.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert write_curves(metrics, tmp_path / "c.png", rate_label="samples/s") is None
    _png_size(tmp_path / "c.png")
