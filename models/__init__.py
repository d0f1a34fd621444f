"""The built-in model zoo (installed as ``autotune.models``)."""

from .spec import Batch, Knob, ModelSpec, ParamCounts, count_parameters

__all__ = ["Batch", "Knob", "ModelSpec", "ParamCounts", "count_parameters"]
