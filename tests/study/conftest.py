"""The search's tests: fake watches say at once whether load is there, so a burst that
sees load does not wait the real ``LOAD_SETTLE_S`` to see whether it stays."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def no_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.study.cores_left.LOAD_SETTLE_S", 0.0)
