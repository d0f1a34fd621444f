"""What the search knows: rebuilt from the study on resume; when it stops."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.testing.burst import FakeBurst, run

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
        tests=str(Path(__file__).parents[1]), marker=str(marker), storage=storage
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
    import autotune.study.api as api
    from autotune.study.state import SearchState

    states: list[SearchState] = []
    loaded_at: list[float] = []
    resolve = api._resolve_model

    class Recorded(SearchState):
        def __post_init__(self) -> None:
            super().__post_init__()
            states.append(self)

    def timed_resolve(model: Any) -> ModelSpec:
        loaded_at.append(time.monotonic())
        return resolve(model)

    monkeypatch.setattr(api, "SearchState", Recorded)
    monkeypatch.setattr(api, "_resolve_model", timed_resolve)
    run(tmp_path, FakeBurst(), trials=3, timeout="30s", output=None)
    assert states and loaded_at
    assert states[0].started <= loaded_at[0]


def test_time_limit_stops_the_search(tmp_path: Path) -> None:
    class Slow(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            time.sleep(0.3)
            return super().__call__(spec, config, **kw)

    burst = Slow()
    result = run(tmp_path, burst, trials=None, timeout="1s", output=None)
    assert "time limit" in result.stopped
    assert 1 <= len(burst.calls) <= 6
