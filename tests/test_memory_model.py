"""The memory model: dominance by an OOM (a proof) and a fitted peak (a prediction)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from autotune.study.plan.memory_model import (
    MemoryModel,
    edge_reason,
    mean_abs_error_pct,
    prediction_error_pct,
)

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


def test_expandable_segments_and_the_parallel_setting_are_their_own_groups() -> None:
    from autotune.config.parallel import ParallelConfig

    model = MemoryModel(budget_bytes=GB, device_kind="cuda")
    ddp = ParallelConfig(nproc_per_node=2)
    model.add(4, cfg(micro_batch=8, grad_accum=2, parallel=ddp), peak_bytes=GB, infeasible=True)
    same = cfg(micro_batch=8, grad_accum=2, parallel=ddp)
    assert model.dominating_oom(same) is not None
    # fragmentation: what ran out may fit with the allocator's expandable segments
    assert model.dominating_oom(dataclasses.replace(same, expandable_segments=True)) is None
    sharded = ParallelConfig(nproc_per_node=2, strategy="fsdp")  # holds a shard of the state
    assert model.dominating_oom(cfg(micro_batch=8, grad_accum=2, parallel=sharded)) is None


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


# -- the edge: a bound once a class ran out, the predicted largest micro-batch -----------
MB = 10**6


def linear_peak(config: TrainConfig, *, fixed: float = 50 * MB, per_token: float = MB) -> int:
    return int(fixed + per_token * config.micro_batch * config.seq_len / 128)


def test_fit_predicts_a_linear_peak_and_its_edge() -> None:
    model = MemoryModel(budget_bytes=GB)
    for mb in (1, 4):
        model.add(
            mb, cfg(micro_batch=mb), peak_bytes=linear_peak(cfg(micro_batch=mb)), infeasible=False
        )
    predicted = model.predict(cfg(micro_batch=100))
    assert predicted is not None and abs(predicted - 150 * MB) < 1
    # 50 MB + 1 MB x mb <= 1 GB: mb 950 is the largest that fits
    assert model.edge_micro_batch(cfg(micro_batch=2)) == 950


def test_no_edge_without_two_sizes() -> None:
    model = MemoryModel(budget_bytes=GB)
    assert model.edge_micro_batch(cfg()) is None
    model.add(0, cfg(micro_batch=4), peak_bytes=100 * MB, infeasible=False)
    assert model.predict(cfg(micro_batch=8)) is None and model.edge_micro_batch(cfg()) is None


def test_after_an_oom_only_configs_within_the_bound_run() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(0, cfg(micro_batch=100), peak_bytes=150 * MB, infeasible=False)
    model.add(1, cfg(micro_batch=2000), peak_bytes=GB, infeasible=True)
    # one size: no fit; the bound is proportional, 1.5 MB per micro-batch: edge 666
    assert model.edge_micro_batch(cfg()) == 666
    assert model.verdict(cfg(micro_batch=600)) is None
    verdict = model.verdict(cfg(micro_batch=700))
    assert verdict is not None and verdict.kind == "predicted"
    assert verdict.reason.startswith("predicted over budget past the edge")
    assert "OOM trial #1" in verdict.reason and "largest micro-batch predicted to fit: 666" in (
        verdict.reason
    )
    # no margin once the class ran out: 1.05 x the budget is skipped
    model.add(2, cfg(micro_batch=600), peak_bytes=650 * MB, infeasible=False)
    assert model.verdict(cfg(micro_batch=1000)) is not None  # 1.05 GB predicted
    # the bound climbs with each config that fits: 650 MB / 600 x 923 <= 1 GB
    assert model.edge_micro_batch(cfg()) == 923


def test_a_class_with_only_an_oom_borrows_the_hungriest_ratio() -> None:
    model = MemoryModel(budget_bytes=GB)
    model.add(0, cfg(micro_batch=10), peak_bytes=100 * MB, infeasible=False)  # 10 MB/mb
    model.add(1, cfg(micro_batch=10, precision="bf16"), peak_bytes=30 * MB, infeasible=False)
    model.add(
        2, cfg(micro_batch=500, activation_checkpointing=True), peak_bytes=GB, infeasible=True
    )
    ckpt = cfg(activation_checkpointing=True)
    assert model.edge_micro_batch(ckpt) == 100
    assert model.verdict(dataclasses.replace(ckpt, micro_batch=100)) is None
    assert model.verdict(dataclasses.replace(ckpt, micro_batch=101)) is not None


def test_prediction_error_in_percent() -> None:
    assert prediction_error_pct(110.0, 100.0) == pytest.approx(10.0)
    assert prediction_error_pct(90.0, 100.0) == pytest.approx(-10.0)
    assert mean_abs_error_pct([10.0, -20.0, None]) == pytest.approx(15.0)
    assert mean_abs_error_pct([None]) is None
    with pytest.raises(ValueError, match="measured=0"):
        prediction_error_pct(1.0, 0)


def test_edge_marking() -> None:
    assert edge_reason(peak_bytes=800 * MB, budget_bytes=GB) == ""
    assert edge_reason(peak_bytes=None, budget_bytes=GB, alloc_retries=0) == ""
    near = edge_reason(peak_bytes=950 * MB, budget_bytes=GB)
    assert "95% of the budget" in near
    retried = edge_reason(peak_bytes=100 * MB, budget_bytes=GB, alloc_retries=3)
    assert retried == "the CUDA allocator retried 3 allocation(s)"
    assert edge_reason(peak_bytes=850 * MB, budget_bytes=GB, fraction=0.8) != ""


def test_predicted_to_fit_takes_no_margin_and_counts_the_bound() -> None:
    model = MemoryModel(budget_bytes=GB)
    assert model.predicted_to_fit(cfg(micro_batch=4096))  # nothing known: it may fit
    for mb in (1, 4):
        model.add(
            mb, cfg(micro_batch=mb), peak_bytes=linear_peak(cfg(micro_batch=mb)), infeasible=False
        )
    assert model.predicted_to_fit(cfg(micro_batch=950))
    assert not model.predicted_to_fit(cfg(micro_batch=1000))  # within the margin, over budget
    assert model.verdict(cfg(micro_batch=1000)) is None  # which the search would still run
    model.add(9, cfg(micro_batch=600), peak_bytes=GB, infeasible=True)  # a smaller real limit
    assert not model.predicted_to_fit(cfg(micro_batch=600))  # dominated
    # the bound through mb 4 (54 MB: 13.5 MB per micro-batch) puts mb 100 over the budget
    assert not model.predicted_to_fit(cfg(micro_batch=100))
    assert model.predicted_to_fit(cfg(micro_batch=70))


GIB = 2**30
GPT2_PARAMS = (124_373_760, 124_373_760)  # gpt2-124m's, all and trained
H200_CONTEXT = 708_837_376  # a burst's CUDA context on the H200 (torch 2.11, CUDA 13.0)


def test_an_unmeasured_class_is_scaled_from_a_hungrier_one_on_cuda() -> None:
    """The H200's figures: gpt2-124m's naive (fp32, mb 1, seq 1024) peaked at 4.16 GiB; the
    playbook's class (bf16, compiled) had no measurement and took mb 64, which ran out of
    24 GB; mb 8 of that class peaked at 6.52 GiB."""
    model = MemoryModel(budget_bytes=24 * GB, device_kind="cuda")
    naive = cfg(micro_batch=1, seq_len=1024)
    model.add(0, naive, peak_bytes=int(4.16 * GIB), infeasible=False, context_bytes=H200_CONTEXT)
    mb64 = cfg(micro_batch=64, seq_len=1024, precision="bf16", compile="default")
    assert model.predict(mb64) is None and model.bound(mb64) is None
    assert model.predicted_to_fit(mb64)  # without the model's size: the benefit of doubt
    assert not model.predicted_to_fit(mb64, params=GPT2_PARAMS)
    mb8 = dataclasses.replace(mb64, micro_batch=8)
    assert model.predicted_to_fit(mb8, params=GPT2_PARAMS)
    scaled = model.scaled(mb8, params=GPT2_PARAMS)
    assert scaled is not None and 6.52 * GIB < scaled <= 24 * GB  # an over-estimate


def test_only_a_class_no_leaner_per_token_scales() -> None:
    model = MemoryModel(budget_bytes=24 * GB, device_kind="cuda")
    measured = cfg(micro_batch=2, seq_len=1024, precision="bf16", compile="default")
    model.add(0, measured, peak_bytes=8 * GB, infeasible=False, context_bytes=H200_CONTEXT)
    for leaner_than_the_config in (
        cfg(micro_batch=8, seq_len=1024),  # fp32 needs more per token than bf16
        cfg(micro_batch=8, seq_len=1024, precision="bf16"),  # eager more than compiled
        cfg(micro_batch=8, seq_len=1024, precision="bf16", compile="default",
            knobs={"block_group": 2}),  # other model knobs
        cfg(micro_batch=1, seq_len=1024, precision="bf16", compile="default"),  # fewer tokens
    ):  # fmt: skip
        assert model.scaled(leaner_than_the_config, params=GPT2_PARAMS) is None
    same = cfg(micro_batch=8, seq_len=1024, precision="bf16", compile="default",
               activation_checkpointing=True)  # fmt: skip
    assert model.scaled(same, params=GPT2_PARAMS) is not None
    unknown = MemoryModel(budget_bytes=24 * GB, device_kind="cuda")
    unknown.add(0, measured, peak_bytes=8 * GB, infeasible=False)  # no context recorded
    cpu = MemoryModel(budget_bytes=24 * GB)
    cpu.add(0, measured, peak_bytes=8 * GB, infeasible=False, context_bytes=0)
    for model in (unknown, cpu):
        assert model.scaled(same, params=GPT2_PARAMS) is None


def test_a_scaled_estimate_needs_its_premises() -> None:
    model = MemoryModel(budget_bytes=24 * GB, device_kind="cuda")
    measured = cfg(micro_batch=1, seq_len=512)
    model.add(0, measured, peak_bytes=3 * GB, infeasible=False, context_bytes=H200_CONTEXT)
    target = cfg(micro_batch=4, seq_len=512, precision="bf16", compile="default")
    assert model.scaled(target, params=(10**8, 10**8)) is not None
    # a peak below AdamW's state and the context: the premise is broken, no estimate
    assert model.scaled(target, params=(2 * 10**8, 2 * 10**8)) is None
    # frozen parameters hold no gradient or moments: a smaller fixed part, more growth
    frozen = model.scaled(target, params=(10**8, 10**7))
    trained = model.scaled(target, params=(10**8, 10**8))
    assert frozen is not None and trained is not None and frozen > trained
    for unlike in (
        dataclasses.replace(target, seq_len=1024, micro_batch=2),  # a longer sequence
        dataclasses.replace(target, compile="reduce-overhead"),  # CUDA graphs' own pool
    ):
        assert model.scaled(unlike, params=(10**8, 10**8)) is None
