"""autotune: find the fastest way to train a PyTorch model on this machine, by measurement.

The public Python API mirrors the CLI, and every name a user needs is importable from here:

- ``autotune.search(model, budget=...)``: the function behind ``autotune search``;
- ``autotune.SearchScope``, ``SearchMachine``, ``SearchLimits``, ``SearchRace``,
  ``SearchStudy``, ``SearchOutput``: ``search``'s options as keyword-only records, and
  ``autotune.search_options(...)``, which builds them from flat keyword arguments;
- ``autotune.tune(build=..., loss=..., batch=...)``: a search of a model defined in a
  notebook or a script, with no spec file;
- ``autotune.PresetLoop``: a preset's config in your own training loop;
- ``autotune.ModelSpec`` (with ``Batch`` and ``Knob``): the contract a model implements;
  ``autotune.load_model(ref, args)``: the spec of a built-in, a Hugging Face architecture
  (``"hf:llama"``) or a user reference, with some of its arguments set;
- ``autotune.load_preset``: a preset file, checked, as a ``Preset``; ``save_preset`` writes one
  atomically, ``check_portability`` checks one against this machine;
- ``autotune.probe()``: this machine, as a ``HardwareProfile`` (``autotune probe --json``);
- the errors, one hierarchy under ``AutotuneError``.

The package follows the flow, one folder per stage (each ``__init__`` says what it owns):
core, contract, config, machine, engine, burst, study, train, data, preset, report, cli.
Heavy imports (torch, optuna) happen on first use of a name, so ``import autotune`` and
``autotune --help`` stay instant.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune._version import __version__
from autotune.core.errors import (
    AutotuneError,
    BudgetError,
    ConfigError,
    DataError,
    ModelLoadError,
    PresetError,
    UsageError,
)

if TYPE_CHECKING:
    from autotune.contract.spec import Batch, Knob, ModelSpec
    from autotune.machine import HardwareProfile, probe
    from autotune.models.registry import load_model
    from autotune.preset import (
        PortabilityReport,
        Preset,
        check_portability,
        load_preset,
        save_preset,
    )
    from autotune.study import SearchResult, search
    from autotune.study.session.options import (
        SearchLimits,
        SearchMachine,
        SearchOutput,
        SearchRace,
        SearchScope,
        SearchStudy,
        search_options,
    )
    from autotune.study.session.tune import tune
    from autotune.train.loop import PresetLoop

__all__ = [
    "AutotuneError",
    "Batch",
    "BudgetError",
    "ConfigError",
    "DataError",
    "HardwareProfile",
    "Knob",
    "ModelLoadError",
    "ModelSpec",
    "PortabilityReport",
    "Preset",
    "PresetError",
    "PresetLoop",
    "SearchLimits",
    "SearchMachine",
    "SearchOutput",
    "SearchRace",
    "SearchResult",
    "SearchScope",
    "SearchStudy",
    "UsageError",
    "__version__",
    "check_portability",
    "load_model",
    "load_preset",
    "probe",
    "save_preset",
    "search",
    "search_options",
    "tune",
]

# Where each lazily loaded name lives. ``tune``'s module is not named ``tune``: importing
# a submodule sets the package attribute of its name, which would hide the function.
_LAZY = {
    "Batch": "autotune.contract.spec",
    "Knob": "autotune.contract.spec",
    "ModelSpec": "autotune.contract.spec",
    "load_model": "autotune.models.registry",
    "Preset": "autotune.preset",
    "load_preset": "autotune.preset",
    "save_preset": "autotune.preset",
    "check_portability": "autotune.preset",
    "PortabilityReport": "autotune.preset",
    "HardwareProfile": "autotune.machine",
    "probe": "autotune.machine",
    "PresetLoop": "autotune.train.loop",
    "SearchResult": "autotune.study",
    "search": "autotune.study",
    **dict.fromkeys(
        (
            "SearchScope",
            "SearchMachine",
            "SearchLimits",
            "SearchRace",
            "SearchStudy",
            "SearchOutput",
            "search_options",
        ),
        "autotune.study.session.options",
    ),
    "tune": "autotune.study.session.tune",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value
