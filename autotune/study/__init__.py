"""The search: Optuna over the training knobs under a memory budget, one burst per trial.

``search(model, budget=..., ...)`` is the Python API and what ``autotune search`` calls;
its options are the records of ``session.options`` (``SearchScope``, ``SearchLimits``, ...).
The planner and the sampler pick configs from the space, each measured by one burst;
then the best few race the naive config in interleaved rounds of
fresh bursts, and the race's winner is written as a preset.

Its rooms follow that flow, each a package saying in one line what it holds:
``session`` (what a search is asked, ``search()`` and ``tune()``, its clock, what it knows
so far, the load outside it, the preset it writes), ``storage`` (the Optuna study on its
storage: the sampler and pruner, the study a search opens, who holds it, several workers
on one), ``plan`` (the space and which config runs next: the starts, the playbook, the
memory model), ``trials`` (one trial measured by a burst, its cost, its record, and the
ledger of where the time went) and ``race`` (the finalists side by side, and how the race
decides). Import a name from its module; this package re-exports only the public ones.

Importing this package imports optuna; ``import autotune`` does not (it loads
``autotune.study`` on first use).
"""

from __future__ import annotations

from autotune.study.session.api import default_study_name, search
from autotune.study.session.options import (
    DEFAULT_BURST_TIMEOUT_S,
    DEFAULT_RUNS_DIR,
    DEFAULT_STEPS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_TRIALS,
    DEFAULT_WARMUP,
    OBJECTIVES,
    Objective,
    SearchLimits,
    SearchMachine,
    SearchOptionsError,
    SearchOutput,
    SearchRace,
    SearchScope,
    SearchStudy,
    search_options,
)
from autotune.study.session.search_result import SearchResult
from autotune.study.storage.optuna_glue import SlowConfigPruner
from autotune.study.trials.burst_runner import BurstFn
from autotune.study.trials.records import SearchEvent, TrialRecord, summarize_config

__all__ = [
    "DEFAULT_BURST_TIMEOUT_S",
    "DEFAULT_RUNS_DIR",
    "DEFAULT_STEPS",
    "DEFAULT_TIME_LIMIT_S",
    "DEFAULT_TRIALS",
    "DEFAULT_WARMUP",
    "OBJECTIVES",
    "BurstFn",
    "Objective",
    "SearchEvent",
    "SearchLimits",
    "SearchMachine",
    "SearchOptionsError",
    "SearchOutput",
    "SearchRace",
    "SearchResult",
    "SearchScope",
    "SearchStudy",
    "SlowConfigPruner",
    "TrialRecord",
    "default_study_name",
    "search",
    "search_options",
    "summarize_config",
]
