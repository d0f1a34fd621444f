"""The search: Optuna over the training knobs under a memory budget, one burst per trial.

``search(model, budget=..., ...)`` is the Python API and what ``autotune search`` calls;
its options are the records of ``options`` (``SearchScope``, ``SearchLimits``, ...).
The planner and the sampler pick configs from the space, each measured by one burst;
then the best few race the naive config and the expert start in interleaved rounds of
fresh bursts, and the race's winner is written as a preset.

The modules follow that flow: ``options`` (what a search is asked), ``search_study`` (the
study it opens), ``api`` (``search()``), ``plan`` and ``playbook`` (which config runs
next), ``objective`` (one trial), ``state`` and ``records`` (what is known),
``race`` and ``race_records`` (the finalists, side by side), ``outcome`` (the preset),
``watch`` (load from outside), ``workers`` and ``ownership`` (several processes on one
study, and who holds it), ``optuna_glue`` (the storage, the sampler, the pruner).

Importing this package imports optuna; ``import autotune`` does not (it loads
``autotune.study`` on first use).
"""

from __future__ import annotations

from autotune.study.api import default_study_name, search
from autotune.study.objective import BurstFn
from autotune.study.options import (
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
from autotune.study.optuna_glue import SlowConfigPruner
from autotune.study.records import SearchEvent, SearchResult, TrialRecord, summarize_config

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
