"""The finalist race: paired ratios, the running order, a machine that changes under the
search, the expert start and naive in the race, the race inside the time limit."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fake_burst import FakeBurst, run

from autotune.burst import BurstResult
from autotune.config import TrainConfig
from autotune.models.spec import ModelSpec
from autotune.study.race import Entrant, _order, paired_ratio
from autotune.study.records import TrialRecord

# -- paired ratios ---------------------------------------------------------------------------


def test_paired_ratio_is_the_geometric_mean_of_the_rounds_ratios() -> None:
    p = paired_ratio([200.0, 300.0, 100.0], [100.0, 100.0, 100.0])
    assert p is not None and p.rounds == 3
    assert p.estimate == pytest.approx(math.exp((math.log(2) + math.log(3) + 0) / 3))
    assert p.low <= p.estimate <= p.high
    assert p.low >= 1.0 - 1e-9 and p.high <= 3.0 + 1e-9  # within the rounds' own ratios
    # deterministic for a seed
    assert paired_ratio([200.0, 300.0, 100.0], [100.0] * 3) == p


def test_paired_ratio_leaves_out_rounds_without_both_figures() -> None:
    p = paired_ratio([200.0, None, 300.0], [100.0, 100.0, None])
    assert p is not None and p.rounds == 1 and p.estimate == pytest.approx(2.0)
    assert (p.low, p.high) == (p.estimate, p.estimate)
    assert paired_ratio([None, 0.0], [100.0, 100.0]) is None


def test_a_load_that_falls_on_a_whole_round_leaves_the_ratio_alone() -> None:
    # round 2 ran on a machine three times slower: both configs slowed alike
    a = [300.0, 100.0, 300.0]
    b = [150.0, 50.0, 150.0]
    p = paired_ratio(a, b)
    assert p is not None and p.estimate == pytest.approx(2.0)
    assert p.low == pytest.approx(2.0) and p.high == pytest.approx(2.0)
    # the unpaired ratio of the best figures would be the same here, but the ratio of two
    # figures taken in different rounds is not: 300 / 50 = 6
    assert a[0] / b[1] == pytest.approx(6.0)


def test_the_running_order_rotates_and_reverses() -> None:
    entrants = [
        Entrant(record=TrialRecord(number=n, state="COMPLETE", status="ok"), roles=["finalist"])
        for n in range(3)
    ]
    orders = [[e.record.number for e in _order(entrants, r)] for r in range(4)]
    assert orders == [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]
    for position in range(3):  # each config runs once in each position in three rounds
        assert {o[position] for o in orders[:3]} == {0, 1, 2}


# -- the race inside a search ----------------------------------------------------------------


@dataclass
class DriftingBurst(FakeBurst):
    """A machine that becomes ``factor`` times slower for everything after ``after``
    bursts (another job started)."""

    after: int = 4
    factor: float = 2.0
    count: int = 0

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        self.count += 1
        result = super().__call__(spec, config, **kw)
        if self.count > self.after and result.tokens_per_s:
            return BurstResult(
                **{
                    **result.to_dict(),
                    "tokens_per_s": result.tokens_per_s / self.factor,
                    "samples_per_s": (result.samples_per_s or 0.0) / self.factor,
                    "step_times_s": tuple(result.step_times_s),
                    "losses": tuple(result.losses),
                }
            )
        return result


def test_the_speedup_comes_from_paired_rounds_not_from_minutes_apart(tmp_path: Path) -> None:
    # naive is measured while the machine is quiet; the machine halves its speed right
    # after (another job starts); the trials' figures then compare two machines (a
    # speedup too small by 2x), the race's paired rounds compare configs.
    burst = DriftingBurst(after=1, factor=2.0)
    result = run(tmp_path, burst, trials=8)
    assert result.best is not None and result.naive is not None and result.race is not None
    true_ratio = burst.speed(result.best.train_config()) / burst.speed(result.naive.train_config())
    unpaired = (result.best.throughput or 0.0) / (result.naive.throughput or 1.0)
    assert unpaired == pytest.approx(true_ratio / 2)  # what the old verification reported
    assert result.speedup == pytest.approx(true_ratio)
    assert result.race.speedup is not None and result.race.speedup.low == pytest.approx(true_ratio)


def test_naive_and_the_expert_start_race_the_finalists(tmp_path: Path) -> None:
    burst = FakeBurst()
    result = run(tmp_path, burst, trials=8, finalists=2)
    race = result.race
    assert race is not None
    roles = {role for e in race.entrants for role in e.roles}
    assert roles == {"finalist", "naive", "expert"}
    assert sum("finalist" in e.roles for e in race.entrants) == 2
    expert = next(e for e in race.entrants if "expert" in e.roles)
    assert expert.record.role == "playbook"  # the toy model has no guide
    # every entrant ran every round, in paired rounds
    assert all(len(e.throughputs) == 2 for e in race.entrants)
    assert len(burst.verify_calls) + len(burst.race_calls) == 2 * len(race.entrants)


def test_naive_wins_when_nothing_beats_it(tmp_path: Path) -> None:
    @dataclass
    class NaiveBest(FakeBurst):
        def speed(self, c: TrainConfig) -> float:
            return 5000.0 if c.micro_batch == 1 and c.compile == "off" else 1000.0

    result = run(tmp_path, NaiveBest(), trials=6)
    assert result.race is not None and result.naive is not None
    assert result.best is not None and result.best.number == result.naive.number
    assert result.speedup == pytest.approx(1.0)


def test_the_race_counts_inside_the_time_limit(tmp_path: Path) -> None:
    import time

    @dataclass
    class Slow(FakeBurst):
        def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
            time.sleep(0.15)
            return super().__call__(spec, config, **kw)

    t0 = time.monotonic()
    result = run(tmp_path, Slow(), trials=None, timeout="3s")
    wall = time.monotonic() - t0
    assert result.race is not None and result.race.rounds >= 1
    assert wall < 3.0 + 1.0  # the race did not run past the limit by more than a burst
    assert "race" in result.stopped or "time limit" in result.stopped
