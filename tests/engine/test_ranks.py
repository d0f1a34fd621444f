"""How a run of several processes ends: rank 0's steps the other ranks wait for
(``rank_zero_first``).

Fast: the collective is replaced here; the real two-process runs are in
tests/test_parallel.py (slow tier)."""

from __future__ import annotations

from typing import Any

import pytest

import autotune.engine.distributed as distributed
from autotune.core.errors import PeerFailed, UsageError
from autotune.engine.distributed import DistInfo, rank_zero_first


class _Collective:
    """``broadcast_object`` of a world of two, seen from one rank: rank 0's value is
    recorded; a rank other than 0 receives ``from_rank_zero``."""

    def __init__(self, from_rank_zero: Any = None) -> None:
        self.sent: list[Any] = []
        self.from_rank_zero = from_rank_zero

    def __call__(self, info: DistInfo, obj: Any) -> Any:
        if info.is_main:
            self.sent.append(obj)
            return obj
        return self.from_rank_zero


RANK0 = DistInfo(rank=0, world_size=2, backend="gloo")
RANK1 = DistInfo(rank=1, local_rank=1, world_size=2, backend="gloo")


def test_rank_zero_runs_the_step_and_tells_the_others_it_went_well(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    collective = _Collective()
    monkeypatch.setattr(distributed, "broadcast_object", collective)
    assert rank_zero_first(RANK0, "to load the data", lambda: "data") == "data"
    assert collective.sent == [None]

    def not_on_rank_1() -> str:
        raise AssertionError("rank 1 ran rank 0's step")

    assert rank_zero_first(RANK1, "to load the data", not_on_rank_1) is None
    assert rank_zero_first(DistInfo(), "to load the data", lambda: "alone") == "alone"


@pytest.mark.parametrize(("error", "code"), [(UsageError("no such data"), 2), (OSError(28), 1)])
def test_a_failure_of_rank_zeros_step_ends_the_others_with_its_code(
    monkeypatch: pytest.MonkeyPatch, error: Exception, code: int
) -> None:
    """Without it, rank 1 waited at a barrier for a rank that had left: gloo's "Connection
    closed by peer" traceback under rank 0's one-paragraph error."""
    collective = _Collective()
    monkeypatch.setattr(distributed, "broadcast_object", collective)

    def fails() -> None:
        raise error

    with pytest.raises(type(error)):
        rank_zero_first(RANK0, "to load the data", fails)
    assert collective.sent == [code]
    monkeypatch.setattr(distributed, "broadcast_object", _Collective(from_rank_zero=code))
    with pytest.raises(PeerFailed, match=r"^rank 0 failed to load the data; its error") as info:
        rank_zero_first(RANK1, "to load the data", fails)
    assert info.value.exit_code == code
