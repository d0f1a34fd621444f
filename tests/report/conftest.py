"""A small real study for the report tests: the search itself (Optuna, SQLite, the planner,
the pruner, the verification, the preset) with fake bursts, so that it takes seconds and
always has an infeasible (out of memory), a pruned and a failed (crash) trial."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from autotune.config.train_config import TrainConfig
from autotune.study import SearchResult
from autotune.testing.burst import MB, FakeBurst, run


@dataclass(frozen=True)
class Searched:
    root: Path
    result: SearchResult
    preset: Path

    @property
    def runs_dir(self) -> Path:
        return self.root / "runs"


def _crash_one(config: TrainConfig) -> str | None:
    # a config this seed's search runs (the memory model's skips decide which ones do)
    if config.precision == "fp32" and config.micro_batch == 4 and config.activation_checkpointing:
        return "crash"
    return None


@pytest.fixture(scope="session")
def searched(tmp_path_factory: pytest.TempPathFactory) -> Searched:
    root = tmp_path_factory.mktemp("report-study")
    # bf16 is 30x slower here (pruned after one step); a micro-batch of 8 runs out of
    # memory (the hand-tuner's guess among them); one config crashes.
    burst = FakeBurst(bf16_slowdown=30.0, oom_above=400 * MB, fail=_crash_one)
    result = run(root, burst, trials=14, steps=4, knobs=["precision=fp32,bf16", "omp_spin=false"])
    counts = result.counts()
    assert counts["infeasible"] and counts["pruned"] and counts["failed"], counts
    return Searched(root=root, result=result, preset=root / "best.yaml")
