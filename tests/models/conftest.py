"""The ``tiny`` fixture: each built-in family at a tiny size (see _tiny_models.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from _tiny_models import TINY, Tiny


@pytest.fixture(params=sorted(TINY))
def tiny(request: pytest.FixtureRequest) -> Tiny:
    return TINY[request.param]


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Tiny ops run faster on one thread, and much faster when other jobs share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
