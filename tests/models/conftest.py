"""The ``tiny`` fixture: each built-in family at a tiny size (see _tiny_models.py)."""

from __future__ import annotations

import pytest
from _tiny_models import TINY, Tiny


@pytest.fixture(params=sorted(TINY))
def tiny(request: pytest.FixtureRequest) -> Tiny:
    return TINY[request.param]


@pytest.fixture(autouse=True)
def _models_on_one_thread(one_thread: None) -> None:
    """Every model test runs on one intra-op thread (the root conftest's ``one_thread``)."""
