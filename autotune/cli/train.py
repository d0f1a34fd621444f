"""`autotune train` (being built)."""

from __future__ import annotations

from autotune.errors import AutotuneError


def train() -> None:
    """Not implemented yet."""
    raise AutotuneError("autotune train is not implemented yet")
