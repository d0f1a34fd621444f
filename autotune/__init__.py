"""autotune: find the fastest way to train a PyTorch model on this machine, by measurement.

The public Python API mirrors the CLI. Heavy imports (torch, optuna) happen inside the
functions that need them, so ``import autotune`` and ``autotune --help`` stay instant.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from autotune.errors import (
    AutotuneError,
    BudgetError,
    ConfigError,
    DataError,
    ModelLoadError,
    PresetError,
    UsageError,
)

if TYPE_CHECKING:
    from autotune.study import SearchResult, search
    from autotune.tuning import tune

__all__ = [
    "AutotuneError",
    "BudgetError",
    "ConfigError",
    "DataError",
    "ModelLoadError",
    "PresetError",
    "SearchResult",
    "UsageError",
    "__version__",
    "search",
    "tune",
]

# ``autotune.search(model, budget=...)`` is the function behind ``autotune search`` (it
# returns the SearchResult the CLI prints); it lives in ``autotune.study``. That package
# imports optuna, so it is loaded on first use of these names, not by ``import autotune``.
_FROM_STUDY = ("SearchResult", "search")


def __getattr__(name: str) -> Any:
    # ``autotune.tune(build=..., loss=..., batch=...)``. Its module is not named ``tune``:
    # importing a submodule sets the package attribute of its name, hiding the function.
    if name == "tune":
        from autotune.tuning import tune

        globals()[name] = tune
        return tune
    if name in _FROM_STUDY:
        import autotune.study

        value = getattr(autotune.study, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
