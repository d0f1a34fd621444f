"""The winner's verification and the preset written from it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fake_burst import GB, FakeBurst, run, toy_spec

from autotune.burst import BurstResult
from autotune.config import TrainConfig
from autotune.errors import AutotuneError
from autotune.models.spec import ModelSpec

# -- verification and the preset ---------------------------------------------------------


def test_the_preset_written_loads_back(tmp_path: Path) -> None:
    from autotune.preset import load_preset

    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8)
    assert result.preset_path == str(tmp_path / "best.yaml")
    preset = load_preset(result.preset_path)
    assert result.best is not None and result.verified is not None
    assert preset.config == result.best.train_config()
    assert preset.task.global_batch == 32 and preset.task.seq_len == preset.config.seq_len
    assert preset.budget_bytes == GB
    assert preset.measured.tokens_per_s == pytest.approx(result.verified.tokens_per_s)
    assert preset.baseline is not None and preset.baseline.speedup == pytest.approx(result.speedup)
    assert preset.baseline.config == burst.calls[0]
    assert preset.search is not None and preset.search.trials_run == 8
    assert preset.search.study_name == result.study_name
    assert preset.model.name == "toy" and preset.fingerprint.device_kind == "cpu"
    assert preset.model.sha256 is None  # a built-in name: no user code to fingerprint
    assert len(burst.verify_calls) == 1
    assert burst.verify_calls[0] == result.best.train_config()


def test_a_user_models_file_hash_is_recorded(tmp_path: Path) -> None:
    import hashlib

    from autotune.preset import load_preset

    model_file = tmp_path / "my_model.py"
    model_file.write_text("from fake_burst import toy_spec\nspec = toy_spec()\n")
    spec = replace(toy_spec(), source=f"{model_file}:spec")
    result = run(tmp_path, FakeBurst(), trials=4, spec=spec)
    assert result.preset_path is not None
    model = load_preset(result.preset_path).model
    assert model.name == f"{model_file}:spec"
    assert model.sha256 == hashlib.sha256(model_file.read_bytes()).hexdigest()


def test_verification_failure_falls_back_to_the_next_best(tmp_path: Path) -> None:
    best_seen: list[TrainConfig] = []

    def verify_fail(config: TrainConfig) -> bool:
        best_seen.append(config)
        return len(best_seen) == 1  # the first candidate crashes while saving

    burst = FakeBurst(verify_fail=verify_fail)
    result = run(tmp_path, burst, trials=8)
    assert len(burst.verify_calls) == 2
    assert result.best is not None and result.best.train_config() == burst.verify_calls[1]
    assert result.verify_attempts[0]["status"] == "failed"
    assert "crash" in result.verify_attempts[0]["problem"]


def test_a_verification_far_below_the_search_is_measured_again(tmp_path: Path) -> None:
    class BusyOnce(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            result = super().__call__(spec, config, **kw)
            if kw.get("verify") and len(self.verify_calls) == 1:  # the machine got busy
                return replace(result, tokens_per_s=(result.tokens_per_s or 0) / 5)
            return result

    burst = BusyOnce()
    notes: list[str] = []
    result = run(
        tmp_path,
        burst,
        trials=4,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert len(burst.verify_calls) == 2
    assert result.best is not None and result.verified is not None
    assert result.verified.tokens_per_s == pytest.approx(result.best.tokens_per_s)
    assert any("measuring once more" in n for n in notes)


def test_when_every_verification_fails_no_preset_is_written(tmp_path: Path) -> None:
    out = tmp_path / "best.yaml"
    out.write_text("an earlier preset\n")
    burst = FakeBurst(verify_fail=lambda c: True)
    with pytest.raises(AutotuneError, match="verification failed"):
        run(tmp_path, burst, trials=6)
    assert out.read_text() == "an earlier preset\n"
