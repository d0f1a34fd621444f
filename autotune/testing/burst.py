"""A fake burst function and a hand-made CPU machine for the search tests (fast,
deterministic, no subprocess).

A fake burst computes throughput and peak memory from the config, runs out of memory
above a size, and calls ``on_step`` for each timed step the way ``run_burst`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from autotune.burst.result import STABLE_MIN_STEPS, BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import Knob, ModelSpec
from autotune.machine.profile import CPUInfo, HardwareProfile, SoftwareInfo
from autotune.study import SearchResult, search, search_options
from autotune.testing.toy import toy_spec as make_toy_spec

MB = 10**6
GB = 10**9


def toy_spec(*, global_batch: int = 32, knobs: tuple[Knob, ...] = ()) -> ModelSpec:
    return make_toy_spec(global_batch=global_batch, knobs=knobs, seq_len=64, max_seq_len=256)


def cpu_profile(*, cores: int = 2, ram: int = 16 * 2**30) -> HardwareProfile:
    return HardwareProfile(
        gpus=(),
        cpu=CPUInfo(
            model_name="Test CPU",
            physical_cores=cores,
            logical_cores=cores,
            total_ram_bytes=ram,
            available_ram_bytes=ram // 2,
            isa_flags=("avx2",),
            torch_threads=cores,
        ),
        software=SoftwareInfo(
            python_version="3.11",
            torch_version="2.13.0",
            torch_cuda_version=None,
            compile_available=True,
            compile_reason="test",
            optuna_version="5.0.0",
            autotune_version="0.1.0",
            compile_cpu_available=True,
        ),
    )


def stable_steps(config: TrainConfig, device: str) -> int:
    """The timed steps a real trial of ``config`` runs where every step takes one time: one
    on a CPU where the step has micro-batches to compare (``micro_batches_even``), else
    two that agree (``steps_stable``)."""
    even = device == "cpu" and config.grad_accum >= STABLE_MIN_STEPS
    return 1 if even else STABLE_MIN_STEPS


@dataclass
class FakeBurst:
    """Throughput and memory as simple functions of the config.

    peak = base + per_token * micro_batch * seq_len (halved by checkpointing); a peak above
    the budget (or above ``oom_above``) is an OOM. bf16 runs ``bf16_slowdown`` times slower.
    """

    base: float = 100 * MB
    per_token: float = 1 * MB
    oom_above: float | None = None
    bf16_slowdown: float = 1.0
    compile_speedup: float = 1.5
    compile_s: float = 0.0
    compile_needs_s: float = 0.0  # a compiled burst given less time than this times out
    interrupt_at: int | None = None  # raise KeyboardInterrupt at this call (1-based)
    report_peaks: bool = True  # False: ok bursts give no peak (nothing to fit)
    fail: Callable[[TrainConfig], str | None] = lambda c: None  # status for failures
    verify_fail: Callable[[TrainConfig], bool] = lambda c: False
    calls: list[TrainConfig] = field(default_factory=list)  # the trials' bursts
    verify_calls: list[TrainConfig] = field(default_factory=list)  # the race's first round
    race_calls: list[TrainConfig] = field(default_factory=list)  # the race's other rounds
    steps_reported: list[int] = field(default_factory=list)
    threads: list[int | None] = field(default_factory=list)  # each burst's thread cap
    stable_within: list[float | None] = field(default_factory=list)  # each burst's
    stop_when_stable: bool = False  # end the timed steps once stable, as a real trial does
    # (``stable_steps``)
    stops_on_load: bool = False  # stop at once where ``should_stop`` gives a reason

    def peak(self, c: TrainConfig) -> float:
        act = (
            self.per_token * c.micro_batch * c.seq_len * (0.5 if c.activation_checkpointing else 1)
        )
        return self.base + act

    def speed(self, c: TrainConfig) -> float:
        tp = 1000.0 * (1 + c.micro_batch**0.5) * (1 + 0.1 * c.num_workers)
        tp *= self.compile_speedup if c.compile != "off" else 1.0
        tp /= self.bf16_slowdown if c.precision == "bf16" else 1.0
        tp *= 0.8 if c.activation_checkpointing else 1.0
        return tp * (1 + 0.001 * c.seq_len)

    def __call__(
        self,
        spec: ModelSpec,
        config: TrainConfig,
        *,
        steps: int,
        warmup: int,
        budget_bytes: int | None,
        timeout_s: float,
        device: str,
        seed: int,
        verify: bool = False,
        on_step: Callable[[int, float], bool] | None = None,
        threads: int | None = None,
        stable_within: float | None = None,
        should_stop: Callable[[], str | None] | None = None,
        compile_timeout_s: float | None = None,
    ) -> BurstResult:
        self.threads.append(threads)
        self.stable_within.append(stable_within)
        if self.stops_on_load and should_stop is not None and (why := should_stop()):
            return BurstResult(status="pruned", reason=why)
        if self.stop_when_stable and stable_within is not None:  # its steps take one time
            steps = min(steps, stable_steps(config, device))
        if verify:
            self.verify_calls.append(config)
        elif on_step is None:  # the search's trials always watch their steps; the race not
            self.race_calls.append(config)
        else:
            self.calls.append(config)
            if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
                raise KeyboardInterrupt
        compile_time_s = first_step_timeout(
            config, timeout_s=timeout_s, compile_timeout_s=compile_timeout_s
        )
        if config.compile != "off" and compile_time_s < self.compile_needs_s:
            return BurstResult(
                status="timeout", reason=f"fake: no result after {compile_time_s:g} s"
            )
        failure = self.fail(config)
        if failure and not verify:
            return BurstResult(status=failure, reason=f"fake {failure}")  # type: ignore[arg-type]
        peak = self.peak(config)
        limit = min(x for x in (budget_bytes, self.oom_above) if x is not None)
        if peak > limit:
            return BurstResult(
                status="oom", reason="fake out of memory", peak_memory_bytes=int(limit)
            )
        tokens = self.speed(config)
        step_time = config.global_batch * config.seq_len / tokens
        reported = 0
        for i in range(steps):
            reported += 1
            if on_step is not None and not on_step(i, step_time):
                self.steps_reported.append(reported)
                return BurstResult(status="pruned", reason="stopped by on_step", timed_steps=i + 1)
        if on_step is not None:
            self.steps_reported.append(reported)
        if verify and self.verify_fail(config):
            return BurstResult(status="crash", reason="fake crash while saving")
        return BurstResult(
            status="ok",
            timed_steps=steps,
            tokens_per_s=tokens,
            samples_per_s=tokens / config.seq_len,
            step_time_median_s=step_time,
            compile_s=self.compile_s if config.compile != "off" else None,
            peak_memory_bytes=int(peak) if self.report_peaks else None,
            eval_loss=1.0 if verify else None,
            checkpoint_bytes=1234 if verify else None,
        )


def first_step_timeout(
    config: TrainConfig,
    *,
    timeout_s: float,
    compile_timeout_s: float | None = None,
    **_other: Any,
) -> float:
    """When a burst of ``config`` is killed while its first step has not ended: at its
    ``compile_timeout_s`` where it compiles and has one, else at its ``timeout_s``
    (``run_burst``). A fake burst function passes its keywords as they came (``**kw``)."""
    cap = compile_timeout_s if config.compile != "off" else None
    return timeout_s if cap is None else min(timeout_s, cap)


def run(tmp_path: Path, burst: FakeBurst, **kwargs: Any) -> SearchResult:
    spec = kwargs.pop("spec", None) or toy_spec()
    options: dict[str, Any] = {
        "budget": "1GB",
        "hardware": cpu_profile(),
        "burst_fn": burst,
        "trials": 12,
        "runs_dir": tmp_path / "runs",
        "output": tmp_path / "best.yaml",
        "steps": 4,
        "warmup": 1,
    }
    options.update(kwargs)
    budget = options.pop("budget")
    return search(spec, budget=budget, **search_options(**options))


def study_of(result: SearchResult) -> optuna.Study:
    url = result.storage
    return optuna.load_study(study_name=result.study_name, storage=url)
