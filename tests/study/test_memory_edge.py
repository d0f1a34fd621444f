"""The memory model in a search: at most one executed OOM per (precision, checkpointing,
compile) class, a prediction and its error on every trial the model could predict, and
configs at the edge of the budget marked."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from fake_burst import MB, FakeBurst, run, toy_spec


@pytest.mark.parametrize("seed", range(6))
def test_at_most_one_executed_oom_per_class(tmp_path: Path, seed: int) -> None:
    # micro-batches of 32 and more run out of the 1 GB budget (50 MB + 1 MB per token)
    burst = FakeBurst(per_token=1 * MB, base=50 * MB)
    result = run(
        tmp_path, burst, trials=30, seed=seed, spec=toy_spec(global_batch=256), output=None
    )
    executed = collections.Counter(
        (t.config["precision"], t.config["activation_checkpointing"], t.config["compile"])
        for t in result.trials
        if t.ran and t.status in ("oom", "over-budget")
    )
    assert executed, "the space must reach past the budget for this test to mean anything"
    assert max(executed.values()) == 1, executed
    # and the search still finds the fastest config that fits
    assert result.best is not None and result.best.config["micro_batch"] == 16
