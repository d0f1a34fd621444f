"""`autotune probe` (being built)."""

from __future__ import annotations

from autotune.errors import AutotuneError


def probe() -> None:
    """Not implemented yet."""
    raise AutotuneError("autotune probe is not implemented yet")
