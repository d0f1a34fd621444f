"""What the search knows: rebuilt from the study on resume; when it stops."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from virtual_clock import VirtualClock

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.study.plan.space import SearchSpace
from autotune.study.session.search_result import SearchResult
from autotune.study.trials.records import SearchEvent, TrialRecord, summarize_config
from autotune.study.trials.trial_log import TrialLog
from autotune.testing.burst import FakeBurst, cpu_profile, run, toy_spec

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


def _bf16_eager_crashes(config: TrainConfig) -> str | None:
    return "crash" if config.precision == "bf16" and config.compile == "off" else None


_SMALL = {"knobs": ["num_workers=0", "omp_spin=false", "activation_checkpointing=false"]}


def _timed_out(result: SearchResult) -> set[str]:
    return {t.summary() for t in result.trials if t.ran and t.status == "timeout"}


def test_a_resume_with_a_longer_burst_limit_measures_the_timed_out_configs_again(
    tmp_path: Path,
) -> None:
    # A config whose burst ran out --burst-timeout was recorded as failed, and a rerun with
    # a longer limit replayed that failure: it never measured the config under the limit
    # it was given. Under the same or a shorter limit, the failure stands.
    def search(limit: str, trials: int, **kwargs: Any) -> tuple[SearchResult, FakeBurst]:
        burst = FakeBurst(compile_needs_s=30.0, fail=_bf16_eager_crashes)
        result = run(tmp_path, burst, trials=trials, burst_timeout=limit, output=None,
                     **_SMALL, **kwargs)  # fmt: skip
        return result, burst

    first, _ = search("10s", 8)
    timed_out = _timed_out(first)
    kept = {t.summary() for t in first.trials if t.ran and t.status in ("oom", "crash")}
    assert timed_out and {t.status for t in first.trials} >= {"oom", "crash"}
    result = first
    for limit in ("10s", "5s"):
        result, burst = search(limit, sum(1 for t in result.trials if t.ran) + 2)
        assert not {summarize_config(c.to_dict()) for c in burst.calls} & (timed_out | kept)
    assert _timed_out(result) >= timed_out  # and those that ran out 5 s
    events: list[SearchEvent] = []
    measured = sum(1 for t in result.trials if t.ran)
    longer, burst = search("60s", measured + len(_timed_out(result)), progress=events.append)
    assert {summarize_config(c.to_dict()) for c in burst.calls} == _timed_out(result)
    again = [t for t in longer.trials if t.ran][measured:]
    assert {t.status for t in again} <= {"ok", "oom"}  # measured, none failed again
    notes = [e.message for e in events if e.kind == "note" and "--burst-timeout" in e.message]
    assert len(notes) == 1, notes
    assert notes[0].startswith(
        f"{len(_timed_out(result))} configs timed out under a shorter --burst-timeout"
    ), notes


def test_only_a_timeout_under_a_shorter_burst_limit_leaves_its_config_unmeasured() -> None:
    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    log = TrialLog(space=space, budget_bytes=10**9, burst_limit_s=60.0)
    configs = [space.naive().replace(micro_batch=mb, grad_accum=32 // mb) for mb in (1, 2, 4, 8)]
    outcomes = [("timeout", 10.0), ("timeout", 60.0), ("crash", 10.0), ("timeout", None)]
    for number, (config, (status, limit)) in enumerate(zip(configs, outcomes, strict=True)):
        log.absorb(TrialRecord(number=number, state="COMPLETE", status=status, ran=True,
                                 config=config.to_dict(), burst_timeout_s=limit))  # fmt: skip
    # a replay of the first: it stands for the same timeout, not for a result
    log.absorb(TrialRecord(number=4, state="COMPLETE", status="timeout", duplicate_of=0,
                             config=configs[0].to_dict()))  # fmt: skip
    assert [log.record_of(c) is None for c in configs] == [True, False, False, False]


def test_a_study_that_did_not_record_its_burst_limits_keeps_its_timeouts(
    tmp_path: Path,
) -> None:
    # An older autotune's trials have no burst limit: whether it was shorter is not known,
    # so their timeouts stand, and the resume says so instead of refusing.
    burst = FakeBurst(compile_needs_s=30.0)
    first = run(tmp_path, burst, trials=8, burst_timeout="10s", output=None, **_SMALL)
    timed_out = _timed_out(first)
    assert timed_out
    db = next((tmp_path / "runs").glob("*/study.db"))
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT trial_user_attribute_id, value_json FROM trial_user_attributes "
            "WHERE key = 'outcome'"
        ).fetchall()
        for row_id, value in rows:
            outcome = {k: v for k, v in json.loads(value).items() if k != "burst_timeout_s"}
            conn.execute(
                "UPDATE trial_user_attributes SET value_json = ? WHERE trial_user_attribute_id = ?",
                (json.dumps(outcome), row_id),
            )
    events: list[SearchEvent] = []
    burst = FakeBurst(compile_needs_s=30.0)
    run(tmp_path, burst, trials=10, burst_timeout="60s", output=None, progress=events.append,
        **_SMALL)  # fmt: skip
    assert not {summarize_config(c.to_dict()) for c in burst.calls} & timed_out
    notes = [e.message for e in events if e.kind == "note" and "--burst-timeout" in e.message]
    assert len(notes) == 1 and "did not record" in notes[0], notes


_KILL_SCRIPT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from autotune.testing.burst import FakeBurst, cpu_profile, toy_spec
    from autotune.study import search, search_options

    class Hang(FakeBurst):
        def __call__(self, spec, config, **kw):
            if len(self.calls) == 3:
                Path({marker!r}).write_text("hanging")
                time.sleep(600)
            return super().__call__(spec, config, **kw)

    search(toy_spec(), budget="1GB", **search_options(
        hardware=cpu_profile(), burst_fn=Hang(), trials=8, storage={storage!r}, study="killed",
        output=None, steps=3, warmup=1))
    """
)


def test_resume_after_the_process_is_killed(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    marker = tmp_path / "hanging"
    script = _KILL_SCRIPT.format(
        tests=str(Path(__file__).parents[2]), marker=str(marker), storage=storage
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
    result = run(tmp_path, burst, storage=storage, study="killed", trials=8, steps=3)
    measured = [t for t in result.trials if t.ran and t.state != "RUNNING"]
    assert len(measured) == 8
    assert len(burst.calls) == 5
    for number, value in finished.items():
        assert next(t for t in result.trials if t.number == number).value == value


def test_the_time_limit_counts_from_the_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Loading the model and probing the machine (torch's import: 2 s of a 20 s limit on
    # the 2-core Xeon) came before the search's clock, so `--timeout 20s` ran 23.5 s.
    import autotune.study.session.api as api
    from autotune.study.session.context import SearchContext

    states: list[SearchContext] = []
    loaded_at: list[float] = []
    resolve = api._resolve_model

    class Recorded(SearchContext):
        @classmethod
        def of(cls, **kw: Any) -> SearchContext:
            made = super().of(**kw)
            states.append(made)
            return made

    def timed_resolve(model: Any, **kwargs: Any) -> ModelSpec:
        loaded_at.append(time.monotonic())
        return resolve(model, **kwargs)

    monkeypatch.setattr(api, "SearchContext", Recorded)
    monkeypatch.setattr(api, "_resolve_model", timed_resolve)
    run(tmp_path, FakeBurst(), trials=3, timeout="30s", output=None)
    assert states and loaded_at
    assert states[0].deadline.started <= loaded_at[0]


def test_time_limit_stops_the_search(tmp_path: Path, clock: VirtualClock) -> None:
    class Slow(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            clock.sleep(3.0)
            return super().__call__(spec, config, **kw)

    burst = Slow()
    # Bursts of 3 s on the virtual clock in a 20 s limit: with a real limit of 2 s, a
    # loaded 2-core machine (the whole suite beside it, a cold worker's imports) spent it
    # on the quick start (out of memory in the fake) and started no naive burst.
    result = run(tmp_path, burst, trials=None, timeout="20s", output=None)
    assert "time limit" in result.stopped
    assert 1 <= len(burst.calls) <= 9
