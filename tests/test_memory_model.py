"""The memory model: dominance by an OOM (a proof) and a fitted peak (a prediction)."""

from __future__ import annotations

from typing import Any

from autotune.config import TrainConfig
from autotune.memory_model import MemoryModel

GB = 10**9


def cfg(**changes: Any) -> TrainConfig:
    base: dict[str, Any] = {
        "micro_batch": 4,
        "grad_accum": 1,
        "seq_len": 128,
        "precision": "fp32",
        "activation_checkpointing": False,
        "compile": "off",
        "num_workers": 0,
        "knobs": {"block_group": 1},
    }
    base.update(changes)
    return TrainConfig(**base)


def test_dominated_configs_are_skipped_with_the_oom_trial_named() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(7, cfg(micro_batch=8), peak_bytes=GB, infeasible=True)
    for bigger in (cfg(micro_batch=8), cfg(micro_batch=16), cfg(micro_batch=8, seq_len=256)):
        verdict = model.verdict(bigger)
        assert verdict is not None and verdict.kind == "dominated" and verdict.trial == 7
        assert verdict.reason == "dominated by OOM trial #7"


def test_not_dominated_when_smaller_or_in_another_group() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(3, cfg(micro_batch=8, seq_len=256, num_workers=1), peak_bytes=GB, infeasible=True)
    for config in (
        cfg(micro_batch=4, seq_len=512, num_workers=1),  # smaller batch
        cfg(micro_batch=16, seq_len=128, num_workers=1),  # shorter sequences
        cfg(micro_batch=8, seq_len=256, num_workers=1, precision="bf16"),
        cfg(micro_batch=8, seq_len=256, num_workers=1, activation_checkpointing=True),
        cfg(micro_batch=8, seq_len=256, num_workers=1, compile="default"),
        cfg(micro_batch=8, seq_len=256, num_workers=1, knobs={"block_group": 2}),
        cfg(micro_batch=8, seq_len=256, num_workers=0),  # CPU: workers count in the peak
    ):
        assert model.dominating_oom(config) is None, config
    assert model.dominating_oom(cfg(micro_batch=8, seq_len=256, num_workers=2)) is not None


def test_workers_do_not_matter_on_cuda() -> None:
    model = MemoryModel(budget_bytes=GB, device_kind="cuda")
    model.add(1, cfg(micro_batch=8, num_workers=2), peak_bytes=GB, infeasible=True)
    assert model.dominating_oom(cfg(micro_batch=8, num_workers=0)) is not None


def test_successful_runs_never_dominate() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(0, cfg(micro_batch=2), peak_bytes=GB // 2, infeasible=False)
    assert model.dominating_oom(cfg(micro_batch=32)) is None


def test_no_prediction_from_a_single_size() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(0, cfg(micro_batch=2), peak_bytes=300_000_000, infeasible=False)
    model.add(1, cfg(micro_batch=2, num_workers=1), peak_bytes=310_000_000, infeasible=False)
    assert model.predict(cfg(micro_batch=64)) is None
    assert model.verdict(cfg(micro_batch=64)) is None


def test_linear_fit_predicts_and_skips_over_budget_with_a_margin() -> None:
    model = MemoryModel(budget_bytes=GB)
    # peak = 100 MB + 1 MB per (sample x token)/128 -> exactly linear in micro_batch * seq_len
    for number, mb in enumerate((1, 2, 4)):
        peak = 100_000_000 + mb * 128 * 1_000_000 // 128
        model.add(number, cfg(micro_batch=mb), peak_bytes=peak, infeasible=False)
    assert abs((model.predict(cfg(micro_batch=8)) or 0) - 108_000_000) < 1e3
    assert model.verdict(cfg(micro_batch=1024)) is None  # 1.124 GB: within the 1.15 margin
    verdict = model.verdict(cfg(micro_batch=2048))  # 2.148 GB predicted
    assert verdict is not None and verdict.kind == "predicted"
    assert "predicted over budget" in verdict.reason
    assert verdict.predicted_bytes is not None and verdict.predicted_bytes > 2 * GB
    # another group has no fit of its own
    assert model.predict(cfg(micro_batch=2048, precision="bf16")) is None


def test_workers_enter_the_fit_on_a_cpu() -> None:
    model = MemoryModel(budget_bytes=GB)
    points = [(1, 0, 200), (2, 0, 300), (1, 2, 600), (4, 1, 700)]  # 100 + 100*mb + 200*w (MB)
    for number, (mb, workers, peak_mb) in enumerate(points):
        model.add(
            number,
            cfg(micro_batch=mb, num_workers=workers),
            peak_bytes=peak_mb * 10**6,
            infeasible=False,
        )
    predicted = model.predict(cfg(micro_batch=8, num_workers=3))
    assert predicted is not None and abs(predicted - 1_500 * 10**6) < 1e4


def test_no_prediction_when_memory_does_not_grow() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(0, cfg(micro_batch=1), peak_bytes=500_000_000, infeasible=False)
    model.add(1, cfg(micro_batch=8), peak_bytes=400_000_000, infeasible=False)
    assert model.predict(cfg(micro_batch=1024)) is None
