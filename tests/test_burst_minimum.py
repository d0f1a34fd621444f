"""A burst's least warm-up and timed time (``min_warmup_s``, ``min_timed_s``): where steps
are short, as a GPU's are, the trial runs more of them than the counts asked for."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from fake_channel import RecordingChannel, StepOut
from fake_models import FAKES

import autotune.burst.trial as trial_module
from autotune.burst.request import BurstRequest, SpecRef
from autotune.burst.result import (
    CUDA_MIN_TIMED_S,
    CUDA_MIN_WARMUP_S,
    MAX_TIMED_STEPS,
    MAX_WARMUP_STEPS,
    Minimum,
    more_steps,
)
from autotune.burst.supervisor import _minimum, run_burst
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model


def test_a_phase_runs_its_count_then_until_its_minimum_time() -> None:
    assert more_steps(2, 4, 10.0, 1.0, most=100)  # the count first, however long
    assert more_steps(4, 4, 0.5, 1.0, most=100)  # the count done, the time not
    assert not more_steps(4, 4, 1.0, 1.0, most=100)
    assert not more_steps(100, 4, 0.5, 1.0, most=100)  # never past the most
    assert not more_steps(4, 4, 0.0, 0.0, most=100)  # no minimum: the count alone


def _phases(
    monkeypatch: pytest.MonkeyPatch,
    step_s: float,
    *,
    warmup: int,
    steps: int,
    minimum: Minimum,
    first_s: float | None = None,
    within: float | None = None,
) -> tuple[list[float], list[float]]:
    """The warm-up and timed step times a trial reports when each step takes ``step_s``
    (its first ``first_s``: a compilation)."""
    calls = iter(range(10_000))

    def fake_step(run: Any, device: Any) -> tuple[float, StepOut]:
        n = next(calls)
        return (first_s if n == 0 and first_s is not None else step_s), StepOut()

    monkeypatch.setattr(trial_module, "timed_step", fake_step)
    channel = RecordingChannel()
    trial = trial_module.Trial({}, channel)  # type: ignore[arg-type]
    stepper = SimpleNamespace(device=torch.device("cpu"))
    failed = trial._timed_steps(
        stepper,  # type: ignore[arg-type]
        iter([]),
        TrainConfig(micro_batch=1, seq_len=8),
        warmup=warmup,
        steps=steps,
        stable_within=within,
        minimum=minimum,
    )
    assert failed is None
    warm = [f["time_s"] for kind, f in channel.sent if kind == "warmup"]
    timed = [f["time_s"] for kind, f in channel.sent if kind == "step"]
    return warm, timed


def test_short_steps_run_until_each_phase_has_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # 17 ms steps, as mu's winner on an H200: 3 + 4 steps would time 68 ms
    warm, timed = _phases(
        monkeypatch, 0.017, warmup=3, steps=4, minimum=Minimum(warmup_s=1.0, timed_s=2.0)
    )
    assert len(warm) == 1 + 59  # the first step, then 1.0 s of steady steps (59 x 17 ms)
    assert len(timed) == 118 and sum(timed) >= 2.0 > sum(timed[:-1])


def test_the_first_warm_up_step_does_not_count_toward_the_minimum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warm, _ = _phases(
        monkeypatch, 0.125, first_s=30.0, warmup=1, steps=4, minimum=Minimum(warmup_s=1.0)
    )
    assert warm[0] == 30.0 and len(warm) == 9  # a 30 s compile, then 1 s of steps


def test_long_steps_run_the_counts_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    warm, timed = _phases(
        monkeypatch, 0.6, warmup=3, steps=4, minimum=Minimum(warmup_s=1.0, timed_s=2.0)
    )
    assert (len(warm), len(timed)) == (3, 4)
    warm, timed = _phases(monkeypatch, 0.001, warmup=3, steps=4, minimum=Minimum())
    assert (len(warm), len(timed)) == (3, 4)  # no minimum: the counts


def test_the_most_steps_bound_a_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    warm, timed = _phases(
        monkeypatch, 1e-6, warmup=1, steps=2, minimum=Minimum(warmup_s=1.0, timed_s=1.0)
    )
    assert (len(warm), len(timed)) == (MAX_WARMUP_STEPS, MAX_TIMED_STEPS)
    assert Minimum(warmup_s=1.0, timed_s=1.0).most_steps(3, 4) == 700
    assert Minimum().most_steps(3, 4) == 7


def test_stable_steps_end_early_only_once_the_minimum_is_spent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, timed = _phases(
        monkeypatch, 0.125, warmup=1, steps=10, minimum=Minimum(timed_s=1.0), within=0.05
    )
    assert len(timed) == 8  # stable from step 2, but 1 s needs 8 steps of 0.125 s
    _, timed = _phases(monkeypatch, 0.5, warmup=1, steps=10, minimum=Minimum(timed_s=1.0),
                       within=0.05)  # fmt: skip
    assert len(timed) == 2  # two steps agree and make the 1 s: done


def test_the_minimum_is_cudas_by_default_and_none_on_a_cpu() -> None:
    assert _minimum("cuda:0", None, None) == Minimum(CUDA_MIN_WARMUP_S, CUDA_MIN_TIMED_S)
    assert _minimum("cuda", None, 0.5) == Minimum(CUDA_MIN_WARMUP_S, 0.5)
    assert _minimum("cpu", None, None) == Minimum()
    with pytest.raises(ValueError, match="minimum seconds"):
        _minimum("cpu", -1.0, None)


def test_a_real_burst_times_its_minimum() -> None:
    spec = load_model(f"{FAKES}:fake_spec")
    config = TrainConfig(micro_batch=2, seq_len=16)
    plain = run_burst(spec, config, steps=2, warmup=1, timeout_s=120)
    assert plain.ok and (plain.warmup_steps, plain.timed_steps) == (1, 2)  # a CPU: the counts
    longer = run_burst(spec, config, steps=2, warmup=1, timeout_s=120, min_timed_s=0.3,
                       min_warmup_s=0.1)  # fmt: skip
    assert longer.ok, longer.reason
    assert longer.timed_steps > 2 and longer.warmup_steps > 1


def test_no_warm_up_asked_adds_none(monkeypatch: pytest.MonkeyPatch) -> None:
    warm, timed = _phases(
        monkeypatch, 0.01, warmup=0, steps=4, minimum=Minimum(warmup_s=1.0, timed_s=0.2)
    )
    assert warm == [] and len(timed) == 20


def test_the_parent_names_a_warm_up_step_past_the_count_as_warm_up() -> None:
    from autotune.burst.trial_report import BurstProgress

    progress = BurstProgress(warmup=3, steps=4, minimum=Minimum(warmup_s=1.0, timed_s=2.0))
    assert progress.next_stage() == "warm-up step 1 of 3"
    progress.warmup_times += [30.0, 0.017, 0.017]  # a compile, then short steps
    assert progress.next_stage() == "warm-up step 4 (past 3: steps are short)"
    progress.warmup_times += [0.5, 0.5]
    assert progress.next_stage() == "timed step 1 of 4"
    progress.step_times += [0.5] * 4
    assert progress.next_stage() == "timed step 5 (past 4: steps are short)"
    plain = BurstProgress(warmup=3, steps=4)
    plain.warmup_times += [30.0, 0.017, 0.017]
    assert plain.next_stage() == "timed step 1 of 4"


def test_the_verification_evaluates_the_model_the_trainer_evaluates(tmp_path: Any) -> None:
    """The first race round's eval step runs the uncompiled model, as ``Trainer.evaluate``
    does: a model compiled whole compiles no forward-only graph there (mu on the 2-core
    CPU: 25-35 s of every search's race went to such graphs training never runs)."""
    from torch._dynamo.testing import CompileCounter

    spec = load_model(f"{FAKES}:oom_spec")
    config = TrainConfig(micro_batch=2, seq_len=16)
    built = trial_module._build(spec, config, torch.device("cpu"))
    counter = CompileCounter()
    compiled = torch.compile(built.model, backend=counter)
    built = dataclasses.replace(built, model=compiled)
    request = BurstRequest(
        spec=SpecRef.of(spec), config=config, steps=1, warmup=0, device="cpu", seed=0,
        workdir=str(tmp_path),
    )  # fmt: skip
    trial = trial_module.Trial(request, RecordingChannel())  # type: ignore[arg-type]
    failed, extra = trial._verify(spec, built, config)
    assert failed is None and math.isfinite(extra["eval_loss"])
    assert counter.frame_count == 0  # nothing compiled for the eval step
    assert extra["checkpoint_bytes"] > 0
