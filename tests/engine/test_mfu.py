"""The MFU rule the burst's figures and the trainer's log lines share."""

from __future__ import annotations

import dataclasses
from typing import Any

import fake_models
import pytest
import torch

from autotune.burst.result import step_figures
from autotune.config.train_config import TrainConfig
from autotune.engine.mfu import mfu
from autotune.testing.fake_caps import cpu_caps
from autotune.train.progress import new_interval, train_record

CAPS = cpu_caps(peak_flops_bf16=2e11, peak_flops_fp32=1e11)
CONFIG = TrainConfig(micro_batch=4, grad_accum=2, seq_len=16)


def _raises(args: Any, seq_len: int) -> float:
    raise ZeroDivisionError("the user's formula")


def test_mfu_is_flops_times_samples_per_device_over_the_peak() -> None:
    spec = fake_models.fake_spec
    flops = spec.flops_per_sample(16)
    assert mfu(spec, CONFIG, CAPS, samples_per_s=100.0) == pytest.approx(flops * 100 / 1e11)
    assert mfu(spec, CONFIG, CAPS, samples_per_s=100.0, world_size=2) == pytest.approx(
        flops * 50 / 1e11
    )
    assert mfu(spec, CONFIG, None, samples_per_s=100.0) is None
    assert mfu(spec, CONFIG, CAPS, samples_per_s=None) is None


def test_a_burst_of_several_processes_counts_each_device_once() -> None:
    """The burst's samples/s are the config's global batch a step, all ranks together;
    its MFU is per device, as the trainer's is."""
    spec = fake_models.fake_spec
    one, two = (
        step_figures(
            spec=spec, config=CONFIG, step_times=[0.2], warmup_times=[], caps=CAPS, world_size=n
        )
        for n in (1, 2)
    )
    assert one["samples_per_s"] == two["samples_per_s"]
    assert two["mfu"] == pytest.approx(one["mfu"] / 2)


def test_a_flops_formula_that_raises_leaves_the_mfu_out_not_the_run() -> None:
    spec = dataclasses.replace(fake_models.fake_spec, flops_fn=_raises)
    figures = step_figures(spec=spec, config=CONFIG, step_times=[0.2], warmup_times=[], caps=CAPS)
    assert figures["mfu"] is None and figures["samples_per_s"]
    interval = {**new_interval(), "samples": 16.0, "time": 0.4}
    record = train_record(
        [1.0, 0.9],
        interval,
        step=2,
        epoch=0,
        lr=1e-3,
        grad_norm=torch.tensor(1.0),
        tokens_per_sample=16,
        spec=spec,
        config=CONFIG,
        caps=CAPS,
        world_size=1,
    )
    assert record["mfu"] is None and record["samples_per_s"] > 0
