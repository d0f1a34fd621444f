"""autotune: find the fastest way to train a PyTorch model on this machine, by measurement.

The public Python API mirrors the CLI. Heavy imports (torch, optuna) happen inside the
functions that need them, so ``import autotune`` and ``autotune --help`` stay instant.
"""

from __future__ import annotations

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

# ``autotune.search(model, budget=...)`` is the function behind ``autotune search`` (it
# returns the SearchResult the CLI prints). Binding it here shadows the submodule of the
# same name as an attribute of the package: ``from autotune.search import ...`` still
# reaches the module (through sys.modules), ``import autotune.search as m`` would not.
# The module imports neither torch nor optuna at load time, so this stays instant.
from autotune.search import SearchResult, search

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
]
