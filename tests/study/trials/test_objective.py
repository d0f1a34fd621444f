"""One trial: infeasible, failed, repeated and time-limited bursts, and the objectives."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna
import pytest
from virtual_clock import VirtualClock

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.core.errors import UsageError
from autotune.study.session.search_result import SearchResult
from autotune.study.trials.records import TrialRecord
from autotune.testing.burst import (
    GB,
    MB,
    FakeBurst,
    first_step_timeout,
    run,
    stable_steps,
    study_of,
)


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


def test_the_naive_baseline_is_never_pruned(tmp_path: Path) -> None:
    # A study where a much faster config is already known (another worker's, or an earlier
    # run's) when the naive config runs: the naive config must still be measured fully.
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, FakeBurst(interrupt_at=1), study="s", steps=6, output=None)
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


def test_trials_end_their_steps_once_stable_and_the_race_runs_every_step(
    tmp_path: Path,
) -> None:
    from autotune.study.trials.objective import TRIAL_STABLE_WITHIN

    burst = FakeBurst(stop_when_stable=True)
    result = run(tmp_path, burst, trials=4, steps=6)
    sent = dict.fromkeys(burst.stable_within)
    assert TRIAL_STABLE_WITHIN in sent and None in sent  # trials, and the race's bursts
    assert len(burst.stable_within) == len(burst.calls) + len(burst.race_calls) + len(
        burst.verify_calls
    )
    trials = [t for t in result.trials if t.ran and t.status == "ok"]
    # on a CPU, after one whose micro-batches ran evenly (stable_steps: two that agree
    # where a step has one micro-batch)
    expected = [1 if t.config["grad_accum"] > 1 else 2 for t in trials]
    assert [t.timed_steps for t in trials] == expected and 1 in expected
    assert burst.steps_reported == expected


def test_the_fake_trial_stops_where_a_real_one_would() -> None:
    accumulates = TrainConfig(micro_batch=8, grad_accum=4, seq_len=16)
    whole_batch = TrainConfig(micro_batch=32, grad_accum=1, seq_len=16)
    assert stable_steps(accumulates, "cpu") == 1  # its micro-batches ran evenly
    assert stable_steps(whole_batch, "cpu") == 2  # one micro-batch: two steps must agree
    assert stable_steps(accumulates, "cuda") == 2  # CUDA queues micro-batches: not timed


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
        knobs=[
            *("precision=fp32", "compile=off", "num_workers=0", "micro_batch=1,2"),
            "omp_spin=false",
        ],
    )
    assert len(burst.calls) == 4
    assert len({repr(c) for c in burst.calls}) == 4
    assert "every config of the space" in result.stopped
    for t in result.trials:
        if t.duplicate_of is not None:
            assert not t.ran and "same config as trial" in t.reason


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
    with pytest.raises(UsageError, match="needs train_steps"):
        run(tmp_path, burst, objective="time-to-train")


def role(result: SearchResult, name: str) -> TrialRecord:
    """The search's one trial in role ``name``."""
    (trial,) = [t for t in result.trials if t.role == name]
    return trial


def test_the_quick_start_like_naive_is_held_only_to_the_deadline(tmp_path: Path) -> None:
    # mu with --timeout 4s: its quick start, the first trial, was capped at the time left
    # for trials and stopped after 2 s, and the search measured nothing
    timeouts: dict[int, float] = {}

    class Recording(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if kw.get("on_step") is not None:
                timeouts.setdefault(config.micro_batch, kw["timeout_s"])
            return super().__call__(spec, config, **kw)

    result = run(tmp_path, Recording(), budget="4GB", trials=3, timeout="100s", output=None)
    assert [t.role for t in result.trials[:2]] == ["quick-start", "naive"]
    assert timeouts[32] > 100.0  # the limit plus its 5%, less the set-up: the deadline's
    assert timeouts[1] > 100.0


def test_an_exempt_burst_cut_at_the_deadline_says_the_deadline_cut_it(tmp_path: Path) -> None:
    # the quick start is held only to the deadline: its reason named "the time left for
    # trials", a cap it was never held to
    from autotune.study.session.deadline import DEADLINE

    class CutQuickStart(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if kw.get("on_step") is not None and config.micro_batch == 32:
                self.calls.append(config)
                return BurstResult(status="timeout", reason="timed out")
            return super().__call__(spec, config, **kw)

    result = run(tmp_path, CutQuickStart(), budget="4GB", trials=3, timeout="60s", output=None)
    quick = role(result, "quick-start")
    assert quick.status == "stopped" and quick.state == "PRUNED"
    assert quick.reason == f"stopped: {DEADLINE} came during its burst"
    assert "time left for trials" not in quick.reason


def test_the_time_limit_stops_a_running_burst(tmp_path: Path, clock: VirtualClock) -> None:
    class SlowSteps(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            on_step = kw.pop("on_step", None)

            def slow(i: int, dt: float) -> bool:
                clock.sleep(0.1 * config.micro_batch)  # the naive mb 1 is quick, mb 8 is not
                return on_step is None or bool(on_step(i, dt))

            return super().__call__(spec, config, on_step=slow, **kw)

    t0 = clock.monotonic()
    # one race round: the race's reserve (3 naive bursts) would leave no time for a trial
    # (5 s: opening the study alone takes 2 s on a loaded 2-core machine)
    result = run(
        tmp_path, SlowSteps(), trials=None, timeout="5s", steps=8, output=None, race_rounds=1
    )
    assert clock.monotonic() - t0 < 9  # the playbook's burst alone would take 6.4 s
    cut = [t for t in result.trials if t.status == "stopped"]
    assert len(cut) == 1 and cut[0].state == "PRUNED"
    assert cut[0].reason.startswith("stopped: the time left for trials")
    assert role(result, "naive").status == "ok"  # the naive baseline is never cut


def test_the_time_limit_caps_a_bursts_timeout_without_blaming_the_config(
    tmp_path: Path, clock: VirtualClock
) -> None:
    timeouts: list[float] = []

    class LongCompile(FakeBurst):
        """A compiled config needs 1000 s of warm-up: longer than any timeout given."""

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if config.compile != "off" and not kw.get("verify"):
                self.calls.append(config)
                timeouts.append(first_step_timeout(config, **kw))
                if timeouts[-1] < 10:
                    clock.sleep(timeouts[-1])  # as a real burst would, until its timeout
                return BurstResult(status="timeout", reason="fake: still compiling")
            return super().__call__(spec, config, **kw)

    t0 = clock.monotonic()
    limited = run(tmp_path / "a", LongCompile(), trials=None, timeout="3s", output=None)
    assert clock.monotonic() - t0 < 8
    compiled = [t for t in limited.trials if t.ran and t.config["compile"] != "off"]
    assert len(compiled) == 1 and compiled[0].status == "stopped"
    assert len(timeouts) == 1 and timeouts[0] <= 3.0  # the time left, not the 300 s default
    timeouts.clear()
    by_trials = run(tmp_path / "b", LongCompile(), trials=6, output=None)
    compiled = [t for t in by_trials.trials if t.ran and t.config["compile"] != "off"]
    assert compiled and all(t.status == "timeout" and t.failed for t in compiled)
    assert all(t == 300.0 for t in timeouts)


def test_a_trials_timeout_leaves_the_race_its_share_of_the_time_limit(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # pointer-gen on the 2-core CPU: the playbook's compiled trial compiled until the
    # search's limit, and the race got one round past it. A trial's timeout is the time
    # left less the race's reserve (here 10 rounds of a naive burst of 0.3 s: 3 s or more).
    timeouts: list[float] = []

    class SlowNaive(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if config.compile != "off" and kw.get("on_step") is not None:
                timeouts.append(first_step_timeout(config, **kw))
                clock.sleep(min(timeouts[-1], 10.0))  # still compiling at its timeout
                return BurstResult(status="timeout", reason="fake: still compiling")
            if config.micro_batch == 1:
                clock.sleep(0.3)
            return super().__call__(spec, config, **kw)

    result = run(tmp_path, SlowNaive(), trials=None, timeout="8s", output=None, race_rounds=10)
    assert timeouts and timeouts[0] <= 8.0 - 3.0
    assert result.race is not None and result.race.rounds >= 2


def _nine_second_search(tmp_path: Path, burst: FakeBurst) -> tuple[SearchResult, list[str]]:
    """A search with a 9 s limit and no preset: its result and the notes it gave."""
    notes: list[str] = []
    result = run(
        tmp_path,
        burst,
        trials=None,
        timeout="9s",
        output=None,
        progress=lambda e: notes.append(e.message) if e.kind == "note" else None,
    )
    return result, notes


class CompilesThenSteps(FakeBurst):
    """The first compiled trial compiles in ``compile_share`` of its compile cap, then
    times steps of ``step_s(cap, timeout_s)`` seconds on the virtual clock; the other
    bursts take 0.5 s (the rest of the limit is not waited)."""

    def __init__(self, clock: VirtualClock, step_s: Any, compile_share: float = 0.8) -> None:
        super().__init__()
        self.clock, self.step_s, self.compile_share = clock, step_s, compile_share
        self.given: list[tuple[float, float]] = []  # its (compile cap, timeout)
        self.ended_at: float | None = None  # its clock's reading once it ended

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        on_step = kw.get("on_step")
        if config.compile == "off" or on_step is None or self.given:
            if self.given:
                self.clock.sleep(0.5)
            return super().__call__(spec, config, **kw)
        cap, timeout_s = kw["compile_timeout_s"], kw["timeout_s"]
        self.given.append((cap, timeout_s))
        started = self.clock.monotonic()
        self.clock.sleep(self.compile_share * cap)  # its compile ends within the cap
        step_s = self.step_s(cap, timeout_s)

        def timed(index: int, _seconds: float) -> bool:
            self.clock.sleep(step_s)
            return bool(on_step(index, step_s))

        result = super().__call__(spec, config, **{**kw, "on_step": timed})
        self.ended_at = self.clock.monotonic() - started
        return replace(result, compile_s=self.compile_share * cap, warmup_s=cap)


def test_a_burst_past_its_compile_runs_its_steps_past_the_compile_cap(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # mu beside a busy core: the playbook's compile took 77 s of its 99 s cap, and its
    # steps of 4.8 s ran out the cap one step short; measured again from the compile
    # cache, it took 17 s more. The cap holds the compile; steps that end within the
    # trial's timeout run on past it.
    burst = CompilesThenSteps(clock, lambda cap, timeout_s: (timeout_s - 0.8 * cap) / 10)
    result, notes = _nine_second_search(tmp_path, burst)
    ((cap, timeout_s),) = burst.given
    assert cap < timeout_s / 1.2  # the time left for trials is well past the cap
    assert burst.ended_at is not None and cap < burst.ended_at < timeout_s
    compiled = next(t for t in result.trials if t.ran and t.config["compile"] != "off")
    assert compiled.status == "ok" and compiled.value
    assert not any("not run again" in n for n in notes)


def test_a_burst_whose_steps_would_pass_its_timeout_is_stopped_at_its_first_step(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # Steps as long as the whole timeout: the burst, past its compile cap, would run out
    # the time left for trials before its steps end. It is stopped at its first timed
    # step rather than at the timeout, and the compile mode stays in the search (its
    # code is in the compile cache).
    burst = CompilesThenSteps(clock, lambda cap, timeout_s: timeout_s / 2)
    result, notes = _nine_second_search(tmp_path, burst)
    ((cap, timeout_s),) = burst.given
    assert burst.ended_at == pytest.approx(0.8 * cap + timeout_s / 2, abs=0.1)  # one step
    compiled = next(t for t in result.trials if t.ran and t.config["compile"] != "off")
    assert compiled.status == "stopped"
    assert compiled.reason.startswith("stopped: the time left for trials")
    assert not any("not run again" in n for n in notes)


def test_a_compile_that_outlasts_a_third_of_the_limit_is_stopped_and_not_run_again(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # pointer-gen on the 2-core CPU: its compile outlasted a default search's whole limit.
    timeouts: list[float] = []

    class NeverCompiles(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if config.compile != "off" and kw.get("on_step") is not None:
                timeouts.append(first_step_timeout(config, **kw))
                clock.sleep(timeouts[-1])  # still compiling at its timeout
                return BurstResult(status="timeout", reason="fake: still compiling")
            if timeouts:
                clock.sleep(0.5)  # a burst's seconds: the rest of the limit is not waited
            return super().__call__(spec, config, **kw)

    result, notes = _nine_second_search(tmp_path, NeverCompiles())
    assert timeouts == [pytest.approx(3.0)]  # a third of the 9 s limit, once
    compiled = [t for t in result.trials if t.config["compile"] != "off"]
    ran = [t for t in compiled if t.ran]
    assert len(ran) == 1 and ran[0].status == "stopped" and not ran[0].failed
    assert "most likely still compiling" in ran[0].reason
    assert any("compile=default is not run again in this search" in n for n in notes)
    assert all(t.status == "skipped" for t in compiled if not t.ran)
    assert sum(t.ran and t.config["compile"] == "off" for t in result.trials) >= 3
    # without a time limit there is no share to cap at: the burst's own timeout
    timeouts.clear()
    run(tmp_path / "b", NeverCompiles(), trials=3, output=None, burst_timeout=2)
    assert timeouts and all(t == 2.0 for t in timeouts)


def test_a_first_compile_may_take_half_the_time_left_for_trials(
    tmp_path: Path, clock: VirtualClock
) -> None:
    # pointer-gen on the 2-core CPU: a third of the limit on a compile that never ended
    # left time for one more config, and the playbook's config without compile was not
    # reached. Until a compiled trial has finished, one may take half the time left for
    # trials (here less than a third of the limit: the race's reserve is 25 rounds of a
    # 0.4 s naive burst), and the same config without compile runs next. (A 12 s limit
    # left a loaded machine too little time for the refinement after it.)
    timeouts: list[float] = []

    class NeverCompiles(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if config.compile != "off" and kw.get("on_step") is not None:
                timeouts.append(first_step_timeout(config, **kw))
                clock.sleep(timeouts[-1])
                return BurstResult(status="timeout", reason="fake: still compiling")
            if config.micro_batch == 1:
                clock.sleep(0.4)
            elif timeouts:
                clock.sleep(0.5)  # a burst's seconds: the rest of the limit is not waited
            return super().__call__(spec, config, **kw)

    limit = 24.0
    # (4 GB: the quick start, first under a short limit, fits)
    result = run(
        tmp_path,
        NeverCompiles(),
        budget="4GB",
        trials=None,
        timeout="24s",
        output=None,
        race_rounds=25,
    )
    assert len(timeouts) == 1 and timeouts[0] <= (limit - 25 * 0.4) / 2
    assert timeouts[0] < limit / 3 - 0.2  # the cap before: a third of the limit
    assert [t.role for t in result.trials[:2]] == ["quick-start", "naive"]
    stopped = role(result, "playbook")
    assert stopped.status == "stopped"
    assert "50% of the time left for trials, as no trial with compile=default" in stopped.reason
    eager = role(result, "playbook-eager")
    assert eager.status == "ok" and eager.number == stopped.number + 1
    assert eager.config == {**stopped.config, "compile": "off"}
    # and the best start's neighbours come after it (the stopped start waits for nothing)
    assert any(t.role == "refine" and t.ran for t in result.trials[eager.number + 1 :])


def test_once_a_compile_has_finished_a_compiled_trial_may_take_a_third_of_the_limit(
    tmp_path: Path, clock: VirtualClock
) -> None:
    timeouts: list[float] = []

    class OnlyThePlaybookCompiles(FakeBurst):
        """The playbook's config (mb 8) compiles; any other compiled one never does."""

        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            hangs = config.compile != "off" and config.micro_batch != 8
            if hangs and kw.get("on_step") is not None:
                timeouts.append(first_step_timeout(config, **kw))
                clock.sleep(timeouts[-1])
                return BurstResult(status="timeout", reason="fake: still compiling")
            if config.micro_batch == 1:
                clock.sleep(0.4)
            return super().__call__(spec, config, **kw)

    # the race's reserve (25 rounds of a 0.4 s naive burst) leaves the trials about 12 s,
    # half of which is less than the third of the limit a proven compile may take, and
    # 4 s more than that third (with 12 s and 10 rounds, 1 s: a loaded machine's set-up
    # of the first trials took it, and the cap was the time left, 2.2 s)
    result = run(
        tmp_path,
        OnlyThePlaybookCompiles(),
        trials=None,
        timeout="24s",
        output=None,
        race_rounds=25,
    )
    assert role(result, "playbook").status == "ok"
    assert timeouts == [pytest.approx(8.0)]  # a third of the 24 s limit
    cut = next(t for t in result.trials if t.status == "stopped")
    assert "(33% of the time limit)" in cut.reason


def test_a_compiled_trial_that_cannot_finish_in_the_time_left_is_not_started() -> None:
    # mu, 2-core CPU, empty compile cache: compiled trials took 44-52 s, and a refinement
    # started with 36 s left for trials was stopped at the limit with nothing measured
    from types import SimpleNamespace

    from autotune.study.trials.objective import will_not_finish
    from autotune.study.trials.records import TrialRecord

    def record(number: int, compile: str, wall_s: float, status: str = "ok") -> TrialRecord:
        config = TrainConfig(micro_batch=8, seq_len=64, compile=compile).to_dict()
        return TrialRecord(
            number=number, state="COMPLETE", status=status, config=config, ran=True, wall_s=wall_s
        )

    records = {0: record(0, "off", 18.0), 1: record(1, "default", 52.0)}
    gpu = SimpleNamespace(device_kind="cuda")  # where mb 16 is new code (a first compile)
    state: Any = SimpleNamespace(
        records=records, deadline=SimpleNamespace(for_trials=lambda: 36.0), space=gpu
    )
    compiled = TrainConfig(micro_batch=16, seq_len=64, compile="default")
    eager = compiled.replace(compile="off")
    assert "less than this compiled trial takes here (52 s: the quickest" in will_not_finish(
        state, state.deadline, compiled
    )
    assert (
        will_not_finish(state, state.deadline, eager) == ""
    )  # an uncompiled burst is not judged by it
    records[2] = record(2, "default", 30.0)  # a quicker compile: 36 s may be enough
    assert will_not_finish(state, state.deadline, compiled) == ""
    records[2] = record(2, "default", 30.0, status="oom")  # only results count
    assert will_not_finish(state, state.deadline, compiled) != ""
    state.deadline.for_trials = lambda: None  # no time limit
    assert will_not_finish(state, state.deadline, compiled) == ""
    state.records = {0: records[0]}  # no compiled trial finished yet: nothing to go by
    state.deadline.for_trials = lambda: 1.0
    assert will_not_finish(state, state.deadline, compiled) == ""


def test_a_bursts_steps_past_the_asked_are_reported_one_in_ten(tmp_path: Path) -> None:
    """A CUDA burst runs more timed steps than asked where they are short (up to 500);
    each report is a write to the study's storage, so past the asked ones one in ten is
    reported."""
    from autotune.testing.burst import study_of

    class ManySteps(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            if kw.get("on_step") is not None:
                kw["steps"] = 34  # as a burst that timed 34 short steps for 4 asked
            return super().__call__(spec, config, **kw)

    result = run(tmp_path, ManySteps(), trials=3, steps=4, race_rounds=1)
    reported = [sorted(t.intermediate_values) for t in study_of(result).trials]
    measured = [r for r in reported if r]
    assert measured and all(r == [0, 1, 2, 3, 4, 14, 24] for r in measured)


# -- why the search stopped: the decider's reason, recorded by the search loop -------------


def test_a_time_limited_search_stops_for_the_reason_its_objective_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trial that would not finish in the time left, none queued that would: the trial is
    # passed over and the search stops, with the objective's reason as the result's.
    import autotune.study.trials.objective as objective
    from autotune.study.plan.planner import Planner

    def will_not_finish(log: Any, deadline: Any, config: TrainConfig) -> str:
        return "the objective's reason" if log.measured() >= 2 else ""

    monkeypatch.setattr(objective, "will_not_finish", will_not_finish)
    monkeypatch.setattr(Planner, "waiting_that_fits", lambda self, study: None)
    result = run(tmp_path, FakeBurst(), trials=None, timeout="1h", output=None)
    assert result.stopped == "the objective's reason"
    last = result.trials[-1]
    assert last.status == "skipped" and last.reason == "the objective's reason"


def test_a_time_limited_search_stops_for_the_reason_its_planner_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.study.plan.planner import Planner

    told = Planner.stop_reason

    def stop_reason(self: Planner, study: optuna.Study | None) -> str:
        return told(self, study) or ("the planner's reason" if self.log.measured() >= 3 else "")

    monkeypatch.setattr(Planner, "stop_reason", stop_reason)
    result = run(tmp_path, FakeBurst(), trials=None, timeout="1h", output=None)
    assert result.stopped == "the planner's reason"
    assert sum(t.ran and t.status != "interrupted" for t in result.trials) == 3
