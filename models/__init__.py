"""The built-in model zoo (installed as ``autotune.models``)."""

from autotune.contract.spec import Batch, Knob, ModelSpec, ParamCounts, count_parameters

from .registry import builtin_names, get_model, list_models, load_model

__all__ = [
    "Batch",
    "Knob",
    "ModelSpec",
    "ParamCounts",
    "builtin_names",
    "count_parameters",
    "get_model",
    "list_models",
    "load_model",
]
