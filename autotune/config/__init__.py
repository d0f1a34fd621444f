"""What a config is: the knob registry (one entry per knob), TrainConfig and its checks, and
the parallel (multi-process) record."""

from autotune.config.checks import check_config
from autotune.config.knobs import KnobDef, docs_table, export_names, registry
from autotune.config.train_config import KNOBS, TrainConfig

__all__ = [
    "KNOBS",
    "KnobDef",
    "TrainConfig",
    "check_config",
    "docs_table",
    "export_names",
    "registry",
]
