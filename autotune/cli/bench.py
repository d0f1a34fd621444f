"""`autotune bench` (being built)."""

from __future__ import annotations

from autotune.errors import AutotuneError


def bench() -> None:
    """Not implemented yet."""
    raise AutotuneError("autotune bench is not implemented yet")
