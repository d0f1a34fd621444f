"""The search: Optuna over the training knobs under a memory budget, one burst per trial.

``search(...)`` is the Python API and what ``autotune search`` calls. Per trial, the
sampler (TPE with a memory constraint) or the planner picks a config from the
``SearchSpace``; a config already measured in this study is not run again; one the memory
model rules out is recorded as infeasible without a burst; otherwise one burst measures
it, and the ``SlowConfigPruner`` stops it when its steps are clearly slower than the best
so far. The winner is verified by a longer burst and written as a preset.

The modules follow that flow:

* ``api``: ``search()`` itself, an outline: check the arguments, build the space, open
  the study, optimize, verify, the result;
* ``records``: what a trial was (``TrialRecord``), progress events (``SearchEvent``) and
  the result (``SearchResult``);
* ``optuna_glue``: the storage, the sampler, the pruner, the study's set-up check;
* ``state``: what the search knows so far (``SearchState``);
* ``objective``: running one trial and classifying its outcome;
* ``plan``: which config runs next (the starts, refinement, configs ruled out);
* ``race``, ``outcome``: the finalist race and the preset;
* ``workers``: several search processes on one study (other devices, other machines).

Importing this package imports optuna; ``import autotune`` does not (it loads
``autotune.search`` on first use).
"""

from __future__ import annotations

from autotune.study.api import (
    DEFAULT_BURST_TIMEOUT_S,
    DEFAULT_RUNS_DIR,
    DEFAULT_STEPS,
    DEFAULT_TIME_LIMIT_S,
    DEFAULT_TRIALS,
    DEFAULT_WARMUP,
    OBJECTIVES,
    Objective,
    default_study_name,
    search,
)
from autotune.study.objective import BurstFn
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
    "SearchResult",
    "SlowConfigPruner",
    "TrialRecord",
    "default_study_name",
    "search",
    "summarize_config",
]
