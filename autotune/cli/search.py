"""`autotune search` (being built)."""

from __future__ import annotations

from autotune.errors import AutotuneError


def search() -> None:
    """Not implemented yet."""
    raise AutotuneError("autotune search is not implemented yet")
