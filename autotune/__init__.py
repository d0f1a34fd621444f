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

__all__ = [
    "AutotuneError",
    "BudgetError",
    "ConfigError",
    "DataError",
    "ModelLoadError",
    "PresetError",
    "UsageError",
    "__version__",
]
