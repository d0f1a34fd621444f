"""The search core, driven by fake burst functions (fast, deterministic, no subprocess).

A fake burst computes throughput and peak memory from the config, runs out of memory
above a size, and calls ``on_step`` for each timed step the way ``run_burst`` does.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from toy_spec import toy_spec as make_toy_spec

from autotune.burst import BurstResult
from autotune.config import TrainConfig
from autotune.errors import AutotuneError, BudgetError, UsageError
from autotune.hardware import CPUInfo, HardwareProfile, SoftwareInfo
from autotune.models.spec import Knob, ModelSpec
from autotune.search import SearchEvent, SearchResult, search

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
    interrupt_at: int | None = None  # raise KeyboardInterrupt at this call (1-based)
    report_peaks: bool = True  # False: ok bursts give no peak (nothing to fit)
    fail: Callable[[TrainConfig], str | None] = lambda c: None  # status for failures
    verify_fail: Callable[[TrainConfig], bool] = lambda c: False
    calls: list[TrainConfig] = field(default_factory=list)
    verify_calls: list[TrainConfig] = field(default_factory=list)
    steps_reported: list[int] = field(default_factory=list)

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
    ) -> BurstResult:
        if verify:
            self.verify_calls.append(config)
        else:
            self.calls.append(config)
            if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
                raise KeyboardInterrupt
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
        if not verify:
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
    return search(spec, **options)


def study_of(result: SearchResult) -> optuna.Study:
    url = result.storage
    return optuna.load_study(study_name=result.study_name, storage=url)


# -- the naive baseline -----------------------------------------------------------------


def test_naive_config_is_trial_0_and_the_speedup_is_measured_against_it(
    tmp_path: Path,
) -> None:
    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8)
    first = burst.calls[0]
    assert (first.precision, first.micro_batch, first.compile, first.num_workers) == (
        "fp32",
        1,
        "off",
        0,
    )
    assert not first.activation_checkpointing
    assert result.trials[0].role == "naive" and result.naive is not None
    assert result.naive.number == 0
    # then a hand-tuner's guess: a quarter of the global batch per micro-batch
    assert result.trials[1].role == "guess" and burst.calls[1].micro_batch == 8
    # the guess became the best: its micro-batch neighbours come next
    guess = burst.calls[1]
    assert {c.micro_batch for c in burst.calls[2:4]} == {4, 16}
    assert all(c.replace(micro_batch=8, grad_accum=4) == guess for c in burst.calls[2:4])
    assert result.trials[2].role == "refine"
    assert result.best is not None and result.verified is not None
    expected = burst.speed(result.best.train_config()) / burst.speed(first)
    assert result.speedup == pytest.approx(expected)
    assert result.speedup > 1.5


def test_refinement_moves_compile_and_each_model_knob_one_at_a_time(tmp_path: Path) -> None:
    # A kernel choice that doubles the speed (as MU's eager attention does in bf16 on a
    # CPU): after the guess becomes the best, its neighbours come next, one knob moved
    # each: micro-batch x2 and /2, compile on, the categorical knob to its other value,
    # the numeric knob one value down (8 is its top).
    knobs = (
        Knob(name="kernel", values=("fused", "plain"), default="fused"),
        Knob(name="group", values=(1, 2, 4, 8), default=8),
    )

    @dataclass
    class KernelBurst(FakeBurst):
        def speed(self, c: TrainConfig) -> float:
            return super().speed(c) * (2.0 if c.knobs["kernel"] == "plain" else 1.0)

    burst = KernelBurst()
    result = run(tmp_path, burst, spec=toy_spec(knobs=knobs), trials=10)
    guess = burst.calls[1]
    assert result.trials[1].role == "guess"
    moves = burst.calls[2:7]
    assert [t.role for t in result.trials[2:7]] == ["refine"] * 5
    changed = []
    for config in moves:
        diff = {
            name
            for name in ("micro_batch", "compile", "precision", "activation_checkpointing")
            if getattr(config, name) != getattr(guess, name)
        } | {f"knobs.{k}" for k, v in config.knobs.items() if v != guess.knobs[k]}
        changed.append((diff, config.micro_batch, config.compile, dict(config.knobs)))
    assert [d for d, *_ in changed] == [
        {"micro_batch"},
        {"micro_batch"},
        {"compile"},
        {"knobs.kernel"},
        {"knobs.group"},
    ]
    assert {mb for _, mb, *_ in changed[:2]} == {guess.micro_batch * 2, guess.micro_batch // 2}
    assert changed[2][2] == "default" and changed[3][3]["kernel"] == "plain"
    assert changed[4][3]["group"] == 4
    # the kernel and compile together win, within ten trials
    assert result.best is not None
    best = result.best.train_config()
    assert best.knobs["kernel"] == "plain" and best.compile == "default"


def test_autotune_search_is_the_python_api(tmp_path: Path) -> None:
    import autotune

    assert autotune.search is search and "search" in autotune.__all__
    result = autotune.search(
        toy_spec(),
        budget="1GB",
        hardware=cpu_profile(),
        burst_fn=FakeBurst(),
        trials=3,
        runs_dir=tmp_path / "runs",
        output=tmp_path / "best.yaml",
        steps=4,
        warmup=1,
    )
    assert isinstance(result, autotune.SearchResult)
    assert result.best is not None and result.preset_path == str(tmp_path / "best.yaml")


def test_importing_autotune_loads_neither_torch_nor_optuna() -> None:
    # what keeps `autotune --help` instant, now that the package binds autotune.search
    code = "import sys, autotune; print(sorted({'torch', 'optuna'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# -- infeasible region: found, and dominated configs never run ---------------------------


def test_infeasible_region_is_found_and_no_dominated_config_is_run(tmp_path: Path) -> None:
    # fp32 only, no compile, no workers: micro_batch x seq_len x checkpointing (36 configs);
    # no peaks from successful bursts, so only OOMs (dominance) can rule configs out.
    burst = FakeBurst(per_token=1 * MB, base=100 * MB, report_peaks=False)  # mb*seq > 900
    result = run(
        tmp_path,
        burst,
        trials=14,
        seq_len="64-256",
        knobs=["precision=fp32", "compile=off", "num_workers=0"],
        n_startup_trials=4,
    )
    statuses = [t.status for t in result.trials]
    assert "oom" in statuses, statuses
    dominated = [t for t in result.trials if t.status == "dominated"]
    assert dominated, statuses
    by_number = {t.number: t for t in result.trials}
    for t in dominated:
        assert not t.ran
        k = int(t.reason.rsplit("#", 1)[1])
        assert t.reason == f"dominated by OOM trial #{k}"
        assert by_number[k].status == "oom"
    # The core property: no config handed to the burst dominates an earlier OOM.
    ooms: list[TrainConfig] = []
    for config in burst.calls:
        for oom in ooms:
            same = oom.activation_checkpointing == config.activation_checkpointing
            assert not (
                same and config.micro_batch >= oom.micro_batch and config.seq_len >= oom.seq_len
            ), f"{config} was run although OOM {oom} dominates it"
        if burst.peak(config) > GB:
            ooms.append(config)
    # What fits was found, and the winner fits.
    assert result.best is not None
    assert burst.peak(result.best.train_config()) <= GB
    assert result.skipped  # dominated trials are reported with their reason
    assert any(reason.startswith("dominated by OOM trial #") for reason in result.skipped)


def test_the_fitted_memory_model_skips_configs_predicted_over_budget(tmp_path: Path) -> None:
    burst = FakeBurst(per_token=1 * MB, base=100 * MB)  # linear, as the model assumes
    result = run(
        tmp_path,
        burst,
        trials=14,
        seq_len="64-256",
        knobs=["precision=fp32", "compile=off", "num_workers=0"],
        n_startup_trials=4,
    )
    predicted = [t for t in result.trials if t.status == "predicted" and t.duplicate_of is None]
    assert predicted
    for t in predicted:
        assert not t.ran and t.reason.startswith("predicted over budget")
        assert burst.peak(t.train_config()) > GB  # really over the budget
    # and a config predicted over budget is never handed to the burst
    assert not any(t.train_config() in burst.calls for t in predicted)


def test_infeasible_trials_are_complete_with_a_positive_constraint(tmp_path: Path) -> None:
    burst = FakeBurst(per_token=2 * MB)
    result = run(tmp_path, burst, trials=10, knobs=["precision=fp32", "compile=off"])
    study = study_of(result)
    done = [t for t in study.trials if t.state.is_finished()]
    infeasible = [t for t in done if t.user_attrs["outcome"]["status"] == "oom"]
    assert infeasible
    for t in infeasible:
        assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 0.0
        assert t.user_attrs["outcome"]["constraint"] > 0
        assert t.constraints and max(t.constraints.values()) > 0
        assert t.user_attrs["outcome"]["peak_memory_bytes"] == GB
    feasible = [t for t in done if t.user_attrs["outcome"]["status"] == "ok"]
    assert all(max(t.constraints.values()) <= 0 for t in feasible)


# -- pruning -----------------------------------------------------------------------------


@pytest.mark.parametrize(("slowdown", "steps_run"), [(30.0, 1), (4.0, 2)])
def test_a_slower_config_is_pruned_after_few_steps(
    tmp_path: Path, slowdown: float, steps_run: int
) -> None:
    # 30x slower: under 1/9 of the best after one step; 4x: under 1/3 after two.
    burst = FakeBurst(bf16_slowdown=slowdown)
    result = run(
        tmp_path,
        burst,
        trials=8,
        steps=10,
        knobs=["precision=fp32,bf16", "compile=off", "num_workers=0", "micro_batch=4,8"],
    )
    bf16 = [
        (c, n)
        for c, n in zip(burst.calls, burst.steps_reported, strict=True)
        if c.precision == "bf16"
    ]
    assert bf16, "the sampler never tried bf16"
    pruned = [t for t in result.trials if t.status == "pruned"]
    assert pruned and all(t.state == "PRUNED" for t in pruned)
    assert all("pruned after" in t.reason for t in pruned if t.ran)
    # Every bf16 burst stopped after 1 or 2 of its 10 steps.
    assert all(n == steps_run for _, n in bf16)
    assert result.best is not None and result.best.config["precision"] == "fp32"


def test_the_naive_baseline_is_never_pruned(tmp_path: Path) -> None:
    # A study where a much faster config is already known (another worker's, or an earlier
    # run's) when the naive config runs: the naive config must still be measured fully.
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, FakeBurst(interrupt_at=1), study="s", output=None)
    study = optuna.load_study(study_name="s", storage=f"sqlite:///{tmp_path}/runs/s/study.db")
    fast = TrainConfig(micro_batch=32, grad_accum=1, seq_len=64, compile="default")
    outcome = {"status": "ok", "ran": True, "throughput": 1e9, "tokens_per_s": 1e9}
    study.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE,
            value=1e9,
            user_attrs={"config": fast.to_dict(), "outcome": outcome},
        )
    )
    burst = FakeBurst()
    run(tmp_path, burst, trials=3, study="s", steps=6, output=None)
    assert burst.calls[0].micro_batch == 1 and burst.steps_reported[0] == 6  # naive, in full
    assert any(n < 6 for n in burst.steps_reported[1:])  # while later ones are pruned


# -- failures, duplicates ----------------------------------------------------------------


def test_failed_bursts_are_infeasible_with_a_reason_and_are_not_rerun(tmp_path: Path) -> None:
    burst = FakeBurst(fail=lambda c: "crash" if c.activation_checkpointing else None)
    result = run(tmp_path, burst, trials=10, knobs=["compile=off", "num_workers=0"])
    failed = [t for t in result.trials if t.status == "crash"]
    assert failed and all(t.failed for t in failed)
    for t in failed:
        # COMPLETE with value 0 and a positive constraint, so TPE learns to avoid them
        assert t.state == "COMPLETE" and t.value == 0.0 and "fake crash" in t.reason
    assert result.counts()["failed"] == len(failed)
    keys = [repr(c) for c in burst.calls]
    assert len(keys) == len(set(keys)), "a config was burst twice"
    # the sampler does not get stuck on the crashing half of the space
    assert len(result.trials) < 30
    assert result.best is not None and not result.best.config["activation_checkpointing"]
    study = study_of(result)
    crashed = [
        t for t in study.trials if (t.user_attrs.get("outcome") or {}).get("status") == "crash"
    ]
    assert all(max(t.constraints.values()) > 0 for t in crashed)


def test_a_repeated_config_replays_its_outcome_without_a_burst(tmp_path: Path) -> None:
    burst = FakeBurst()
    # 4 configs in the space, 4 measured: the sampler must repeat itself on the way
    result = run(
        tmp_path,
        burst,
        trials=6,
        knobs=["precision=fp32", "compile=off", "num_workers=0", "micro_batch=1,2"],
    )
    assert len(burst.calls) == 4
    assert len({repr(c) for c in burst.calls}) == 4
    assert "every config of the space" in result.stopped
    for t in result.trials:
        if t.duplicate_of is not None:
            assert not t.ran and "same config as trial" in t.reason


# -- too small a budget ------------------------------------------------------------------


def test_budget_below_the_smallest_config_is_a_budget_error(tmp_path: Path) -> None:
    burst = FakeBurst(base=2 * GB)
    with pytest.raises(BudgetError) as info:
        run(tmp_path, burst, budget="1GB")
    message = str(info.value)
    assert "too small" in message and "smallest config" in message
    assert "953.67 MiB" in message  # the peak the smallest config reached before its OOM
    assert info.value.exit_code == 2
    # naive, then the smallest (checkpointing on, shortest sequences); nothing else
    assert len(burst.calls) == 2
    assert burst.calls[1].activation_checkpointing
    assert not (tmp_path / "best.yaml").exists()


def test_budget_fitting_only_with_checkpointing_goes_on(tmp_path: Path) -> None:
    # naive (mb 1, seq 128, no ckpt) needs 100 + 128 MB; ckpt halves activations
    burst = FakeBurst(base=100 * MB, per_token=1 * MB)
    result = run(tmp_path, burst, budget="200MB", seq_len=128, trials=6)
    assert result.trials[0].status == "oom"
    assert result.trials[1].role == "smallest" and result.trials[1].status == "ok"
    assert result.best is not None and result.speedup is None  # naive did not fit


# -- budget strings ----------------------------------------------------------------------


def test_budget_strings(tmp_path: Path) -> None:
    burst = FakeBurst()
    ram = 4 * GB
    result = run(tmp_path, burst, budget="0.5", hardware=cpu_profile(ram=ram), trials=2)
    assert result.budget_bytes == ram // 2
    for text, expected in (("1GB", GB), ("1GiB", 2**30), ("1000MB", GB)):
        r = run(tmp_path / text, FakeBurst(), budget=text, trials=1, output=None)
        assert r.budget_bytes == expected
    with pytest.raises(BudgetError, match="cannot read budget"):
        run(tmp_path, burst, budget="lots")
    notes: list[str] = []
    r = run(
        tmp_path / "big",
        FakeBurst(),
        budget="64GB",
        trials=1,
        output=None,
        hardware=cpu_profile(ram=8 * GB),
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    assert any("above the memory" in n for n in notes) and r.notes


# -- resume ------------------------------------------------------------------------------


def test_resume_after_an_interrupt_loses_no_finished_trial(tmp_path: Path) -> None:
    burst = FakeBurst(interrupt_at=5)
    kwargs: dict[str, Any] = {"trials": 9, "knobs": ["compile=off"]}
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, burst, **kwargs)
    first_configs = list(burst.calls[:4])
    storage = f"sqlite:///{next((tmp_path / 'runs').glob('*/study.db'))}"
    study = optuna.load_study(study_name=None, storage=storage)
    states = [t.state for t in study.trials]
    assert optuna.trial.TrialState.RUNNING not in states
    interrupted = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert len(interrupted) == 1
    assert interrupted[0].user_attrs["outcome"]["status"] == "interrupted"
    before = {t.number: t.value for t in study.trials if t.state.is_finished() and t.value}

    second = FakeBurst()
    result = run(tmp_path, second, **kwargs)
    measured = [t for t in result.trials if t.ran and t.status != "interrupted"]
    assert len(measured) == 9  # the target counts the first run's trials
    assert len(second.calls) == 9 - 4 - 0  # 4 measured before the interrupt
    for config in second.calls:
        assert config not in first_configs, "a finished config was run again"
    after = {t.number: t.value for t in result.trials}
    for number, value in before.items():
        assert after[number] == value


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_search import FakeBurst, cpu_profile, toy_spec
    from autotune.search import search

    class Hang(FakeBurst):
        def __call__(self, spec, config, **kw):
            if len(self.calls) == 3:
                Path({marker!r}).write_text("hanging")
                time.sleep(600)
            return super().__call__(spec, config, **kw)

    search(toy_spec(), budget="1GB", hardware=cpu_profile(), burst_fn=Hang(), trials=8,
           storage={storage!r}, study="killed", output=None, steps=3, warmup=1)
    """
)


def test_resume_after_the_process_is_killed(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    marker = tmp_path / "hanging"
    script = _KILL_SCRIPT.format(
        tests=str(Path(__file__).parent), marker=str(marker), storage=storage
    )
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert proc.poll() is None, "the search process ended early"
            assert time.monotonic() < deadline, "the search never reached its 4th burst"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    study = optuna.load_study(study_name="killed", storage=storage)
    finished = {t.number: t.value for t in study.trials if t.state.is_finished()}
    assert len([t for t in study.trials if (t.user_attrs.get("outcome") or {}).get("ran")]) == 3

    burst = FakeBurst()
    result = run(tmp_path, burst, storage=storage, study="killed", trials=8)
    measured = [t for t in result.trials if t.ran and t.state != "RUNNING"]
    assert len(measured) == 8
    assert len(burst.calls) == 5
    for number, value in finished.items():
        assert next(t for t in result.trials if t.number == number).value == value


def test_a_study_made_for_another_search_is_refused(tmp_path: Path) -> None:
    run(tmp_path, FakeBurst(), trials=2, study="mine", output=None)
    with pytest.raises(UsageError, match=r"different search.*budget_bytes"):
        run(tmp_path, FakeBurst(), trials=2, study="mine", budget="2GB", output=None)


def test_a_journal_storage_works(tmp_path: Path) -> None:
    url = f"journal:{tmp_path / 'journal.log'}"
    result = run(tmp_path, FakeBurst(), trials=3, storage=url, output=None)
    assert result.best is not None and (tmp_path / "journal.log").stat().st_size > 0
    again = run(tmp_path, FakeBurst(), trials=4, storage=url, output=None)
    assert sum(1 for t in again.trials if t.ran) == 4


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
    assert len(burst.verify_calls) == 1
    assert burst.verify_calls[0] == result.best.train_config()


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


def test_warm_start_runs_the_preset_config_and_its_neighbours_first(tmp_path: Path) -> None:
    first = run(tmp_path / "a", FakeBurst(), trials=8)
    assert first.preset_path is not None and first.best is not None
    burst = FakeBurst()
    run(tmp_path / "b", burst, trials=5, warm_start=first.preset_path)
    warm = first.best.train_config()
    assert burst.calls[1] == warm  # right after the naive baseline
    for neighbour in burst.calls[2:4]:
        assert (neighbour.micro_batch, neighbour.num_workers) != (
            warm.micro_batch,
            warm.num_workers,
        )
        diff = {k for k, v in neighbour.to_dict().items() if warm.to_dict()[k] != v}
        assert diff <= {"micro_batch", "grad_accum", "num_workers"}


# -- objectives --------------------------------------------------------------------------


def test_time_to_train_charges_compile_time(tmp_path: Path) -> None:
    knobs = ["precision=fp32", "num_workers=0", "micro_batch=8", "activation_checkpointing=false"]
    burst = FakeBurst(compile_s=30.0)
    short = run(
        tmp_path / "short", burst, trials=2, knobs=knobs, objective="time-to-train", train_steps=5
    )
    assert short.best is not None and short.best.config["compile"] == "off"
    assert short.best.time_to_train_s is not None
    long = run(
        tmp_path / "long",
        FakeBurst(compile_s=30.0),
        trials=2,
        knobs=knobs,
        objective="time-to-train",
        train_steps=100_000,
    )
    assert long.best is not None and long.best.config["compile"] == "default"
    with pytest.raises(UsageError, match="--train-steps"):
        run(tmp_path, burst, objective="time-to-train")


def test_progress_events_and_json(tmp_path: Path) -> None:
    import json

    events: list[SearchEvent] = []
    result = run(tmp_path, FakeBurst(), trials=4, progress=events.append)
    kinds = [e.kind for e in events]
    assert kinds[0] == "start" and "verify" in kinds
    trial_events = [e for e in events if e.kind == "trial"]
    assert len(trial_events) == len(result.trials)
    assert all(e.trials_left is not None for e in trial_events)
    data = json.loads(json.dumps(result.to_dict()))
    assert data["best"]["config"] == dict(result.best.config)  # type: ignore[union-attr]
    assert data["counts"]["measured"] == 4
    assert data["preset_path"] == str(tmp_path / "best.yaml")


def test_time_limit_stops_the_search(tmp_path: Path) -> None:
    class Slow(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            time.sleep(0.3)
            return super().__call__(spec, config, **kw)

    burst = Slow()
    result = run(tmp_path, burst, trials=None, timeout="1s", output=None)
    assert "time limit" in result.stopped
    assert 1 <= len(burst.calls) <= 6


def test_the_time_limit_stops_a_running_burst(tmp_path: Path) -> None:
    class SlowSteps(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            on_step = kw.pop("on_step", None)

            def slow(i: int, dt: float) -> bool:
                time.sleep(0.05 * config.micro_batch)  # the naive mb 1 is quick, mb 8 is not
                return on_step is None or bool(on_step(i, dt))

            return super().__call__(spec, config, on_step=slow, **kw)

    t0 = time.monotonic()
    result = run(tmp_path, SlowSteps(), trials=None, timeout="2s", steps=8, output=None)
    assert time.monotonic() - t0 < 6  # the guess's burst alone would take 3.2 s
    cut = [t for t in result.trials if t.status == "stopped"]
    assert len(cut) == 1 and cut[0].state == "PRUNED"
    assert cut[0].reason.startswith("stopped: the search's time limit")
    assert result.trials[0].status == "ok"  # the naive baseline is never cut


def test_the_time_limit_caps_a_bursts_timeout_without_blaming_the_config(
    tmp_path: Path,
) -> None:
    timeouts: list[float] = []

    class LongCompile(FakeBurst):
        """A compiled config needs 1000 s of warm-up: longer than any timeout given."""

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if config.compile != "off" and not kw.get("verify"):
                self.calls.append(config)
                timeouts.append(kw["timeout_s"])
                if kw["timeout_s"] < 10:
                    time.sleep(kw["timeout_s"])  # as a real burst would, until its timeout
                return BurstResult(status="timeout", reason="fake: still compiling")
            return super().__call__(spec, config, **kw)

    t0 = time.monotonic()
    limited = run(tmp_path / "a", LongCompile(), trials=None, timeout="3s", output=None)
    assert time.monotonic() - t0 < 8
    compiled = [t for t in limited.trials if t.ran and t.config["compile"] != "off"]
    assert len(compiled) == 1 and compiled[0].status == "stopped"
    assert len(timeouts) == 1 and timeouts[0] <= 3.0  # the time left, not the 300 s default
    timeouts.clear()
    by_trials = run(tmp_path / "b", LongCompile(), trials=6, output=None)
    compiled = [t for t in by_trials.trials if t.ran and t.config["compile"] != "off"]
    assert compiled and all(t.status == "timeout" and t.failed for t in compiled)
    assert all(t == 300.0 for t in timeouts)


# -- the real burst runner, end to end ---------------------------------------------------

_TINY_MODEL = textwrap.dedent(
    """
    import torch
    from torch import nn
    from autotune.models.spec import ModelSpec

    class Tiny(nn.Module):
        def __init__(self, vocab=32, dim=16):
            super().__init__()
            self.emb = nn.Embedding(vocab, dim)
            self.out = nn.Linear(dim, vocab)

        def forward(self, x):  # x: (B, T)
            return self.out(self.emb(x))  # (B, T, V)

    def build(vocab=32, dim=16):
        return Tiny(vocab, dim)

    def make_batch(args, batch_size, seq_len, generator):
        x = torch.randint(0, args["vocab"], (batch_size, seq_len + 1), generator=generator)
        return {"input": x[:, :-1], "target": x[:, 1:]}

    def loss(model, batch):
        logits = model(batch["input"])
        return nn.functional.cross_entropy(logits.flatten(0, 1), batch["target"].flatten())

    def flops(args, seq_len):
        return 6.0 * (args["vocab"] * args["dim"] * 2) * seq_len

    spec = ModelSpec(name="tiny", description="tiny LM", task="lm", build_fn=build,
                     make_batch_fn=make_batch, loss_fn=loss, flops_fn=flops,
                     args={"vocab": 32, "dim": 16}, seq_len=16, max_seq_len=64,
                     global_batch=8)
    """
)


def _real_burst_available() -> bool:
    from autotune.burst import run_burst

    try:
        run_burst(toy_spec(), toy_spec_config(), steps=1, timeout_s=1.0)
    except NotImplementedError:
        return False
    except Exception:
        return True
    return True


def toy_spec_config() -> TrainConfig:
    return TrainConfig(micro_batch=1, grad_accum=1, seq_len=8)


@pytest.mark.slow
def test_end_to_end_with_the_real_burst_runner(tmp_path: Path) -> None:
    if not _real_burst_available():
        pytest.skip("autotune.burst.run_burst is not implemented yet")
    from autotune.hardware import probe
    from autotune.models.registry import load_model
    from autotune.preset import load_preset

    model_file = tmp_path / "tiny_model.py"
    model_file.write_text(_TINY_MODEL)
    spec = load_model(f"{model_file}:spec")
    result = search(
        spec,
        budget="4GB",
        device="cpu",
        hardware=probe(),
        trials=4,
        steps=3,
        warmup=1,
        knobs=["compile=off", "num_workers=0", "precision=fp32"],
        runs_dir=tmp_path / "runs",
        output=tmp_path / "tiny.yaml",
        burst_timeout=120,
    )
    assert result.best is not None and result.verified is not None and result.verified.ok
    assert result.verified.eval_loss is not None
    assert result.naive is not None and result.naive.status == "ok"
    assert result.speedup is not None and result.speedup > 0
    preset = load_preset(tmp_path / "tiny.yaml")
    assert preset.config == result.best.train_config()
    assert preset.measured.peak_memory_bytes is not None
