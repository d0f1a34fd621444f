"""The claim a trial makes before its burst (``Workers.gate``), in one process: the other
workers' trials are made by hand in the study."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.study.plan.planner import Planner
from autotune.study.plan.space import SearchSpace
from autotune.study.session.context import Limits, SearchContext
from autotune.study.storage import workers
from autotune.study.trials.trial_log import TrialLog
from autotune.testing.burst import cpu_profile, toy_spec


def _setup(tmp_path: Path, trials: int | None) -> tuple[optuna.Study, workers.Workers]:
    spec = toy_spec()
    hardware = cpu_profile()
    space = SearchSpace.for_model(spec, hardware.device("cpu"), cpu_count=2)
    context = SearchContext.of(
        spec=spec, space=space, budget_bytes=10**9, limits=Limits(trials, None)
    )
    storage = f"sqlite:///{tmp_path / 's.db'}"  # (no heartbeats: trials are made by hand)
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    log = TrialLog.of(context)
    planner = Planner(context=context, log=log)  # the log's writer
    return study, workers.Workers(
        log=log,
        absorb_others=planner.absorb_others,
        deadline=context.deadline,
        study=study,
        name="s",
    )


def _other_worker_claims(study: optuna.Study, key: list, *, measure: bool = True) -> None:
    trial = study.ask()
    trial.set_user_attr("claim", {"key": key, "measure": measure})


def _key(w: workers.Workers, config) -> list:  # type: ignore[no-untyped-def]
    return [*map(workers._plain, w.log.space.key(config)), ""]


def test_a_config_another_worker_measures_is_not_measured_again(tmp_path: Path) -> None:
    study, w = _setup(tmp_path, trials=None)
    naive = w.log.space.naive()
    _other_worker_claims(study, _key(w, naive))
    mine = study.ask()
    status, reason = w.gate(mine, naive, again=False)
    assert status == "skipped" and "is measuring it" in reason
    assert mine.user_attrs["claim"]["measure"] is True  # written before it read
    other = w.log.space.smallest().replace(micro_batch=2)
    assert w.gate(study.ask(), other, again=False) == ("", "")


def test_of_two_that_yield_the_first_queues_the_config_again(tmp_path: Path) -> None:
    study, w = _setup(tmp_path, trials=None)
    naive = w.log.space.naive()
    mine = study.ask()  # the lower trial id
    _other_worker_claims(study, _key(w, naive))
    assert w.gate(mine, naive, again=False)[0] == "skipped"
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.system_attrs["fixed_params"] for t in waiting] == [w.log.space.params_of(naive)]


def test_the_trial_budget_counts_other_workers_running_bursts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one trial left and another worker's burst running, a worker does not start a
    burst: it steps back and waits; once that burst is in, the study is full."""
    study, w = _setup(tmp_path, trials=1)
    _other_worker_claims(study, ["other"])
    slept: list[float] = []

    def other_burst_ends(seconds: float) -> None:
        slept.append(seconds)
        running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))[0]
        outcome = {"status": "ok", "ran": True}
        study._storage.set_trial_user_attr(running._trial_id, "outcome", outcome)
        study.tell(running.number, 1.0)

    monkeypatch.setattr(workers.time, "sleep", other_burst_ends)
    mine = study.ask()
    status, reason = w.gate(mine, w.log.space.naive(), again=False)
    assert slept and status == "stopped" and "1 measured trials" in reason
    assert mine.user_attrs["claim"]["measure"] is False  # stepped back
