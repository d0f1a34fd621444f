"""Who owns the search's state: a frozen context, and a trial log with one writer."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from autotune.study.plan.space import SearchSpace
from autotune.study.session.context import Limits, SearchContext
from autotune.study.trials.records import TrialRecord
from autotune.study.trials.trial_log import TrialLog
from autotune.testing.burst import cpu_profile, toy_spec

PACKAGE = Path(__file__).resolve().parents[3] / "autotune"
# what changes a TrialLog: its own methods, and its fields assigned or filled in place
WRITES = re.compile(
    r"\.(absorb|record_trial)\(|\.(records|by_key)\[[^\]]*\]\s*=(?!=)|\.consecutive_skips\s*[+]?=(?!=)"
)


def _context() -> SearchContext:
    spec = toy_spec()
    space = SearchSpace.for_model(spec, cpu_profile().device("cpu"), cpu_count=2)
    return SearchContext.of(spec=spec, space=space, budget_bytes=10**9, limits=Limits(3, 60.0))


def test_the_context_is_not_written_once_made() -> None:
    context = _context()
    with pytest.raises(dataclasses.FrozenInstanceError):
        context.burst_limit_s = 1.0  # type: ignore[misc]
    watched = dataclasses.replace(context, watch=None, burst_limit_s=30.0)
    assert watched.deadline is context.deadline  # one clock, one race reserve
    assert context.burst_limit_s is None


def test_the_log_takes_the_searchs_limits_and_counts_measured_trials() -> None:
    context = dataclasses.replace(_context(), burst_limit_s=30.0)
    log = TrialLog.of(context)
    assert (log.trial_limit, log.burst_limit_s) == (3, 30.0)
    naive = context.space.naive()
    log.record_trial(TrialRecord(number=0, state="COMPLETE", status="ok", ran=True,
                                 config=naive.to_dict(), value=5.0))  # fmt: skip
    log.record_trial(TrialRecord(number=1, state="PRUNED", status="skipped", ran=False))
    assert log.record_of(naive) is not None and log.trials_left() == 2
    assert log.consecutive_skips == 1


def test_the_trial_log_is_written_only_where_its_docstring_says() -> None:
    # TrialLog's docstring names its one writer: the planner (this process's trials, after
    # each, and the other workers' that Workers reads); the rest only read it.
    writers = {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "trial_log.py" and WRITES.search(path.read_text())
    }
    assert writers == {"study/plan/planner.py"}


def test_a_resumed_studys_trials_are_in_the_log_from_the_start() -> None:
    context = _context()
    naive = context.space.naive()
    earlier = TrialRecord(number=0, state="COMPLETE", status="ok", ran=True,
                          config=naive.to_dict(), value=5.0)  # fmt: skip
    log = TrialLog.of(context, [earlier])
    assert log.record_of(naive) is earlier and log.trials_left() == 2
    assert log.consecutive_skips == 0  # not this run's trial
