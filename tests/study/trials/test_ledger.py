"""The ledger of a search's time: each part from the trials' own figures, a compile counted
as a first one once per compiled code, and the rest of the wall as ``other``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from autotune.study.trials.ledger import LEDGER_PARTS, TimeLedger, ledger_of
from autotune.study.trials.records import TrialRecord
from autotune.testing.burst import FakeBurst, run

EAGER = TrainConfig(micro_batch=8, grad_accum=4, seq_len=64)
COMPILED = EAGER.replace(compile="default")


def _record(number: int, config: TrainConfig, **figures: Any) -> TrialRecord:
    return TrialRecord(
        number=number,
        state="COMPLETE",
        status="ok",
        config=config.to_dict(),
        ran=True,
        throughput=100.0,
        **figures,
    )


def test_each_part_comes_from_the_trials_figures() -> None:
    records = [
        _record(0, EAGER, overhead_s=5.0, warmup_s=1.0, timed_s=8.0),
        _record(1, COMPILED, overhead_s=0.5, warmup_s=52.0, timed_s=6.0, compile_s=50.0),
        # OpenMP's policy acts outside the model: its compile comes from the cache
        _record(2, COMPILED.replace(omp_spin=True), overhead_s=0.5, warmup_s=5.0, compile_s=3.0),
        _record(3, COMPILED.replace(micro_batch=16, grad_accum=2), warmup_s=40.0, compile_s=39.0),
        TrialRecord(number=4, state="PRUNED", status="skipped", config=EAGER.to_dict()),
    ]
    ledger = ledger_of(
        records, total_s=300.0, trials_s=180.0, race_s=100.0, writing_s=0.5, device_kind="cuda"
    )
    assert ledger.first_compiles == 2
    assert ledger.first_compiles_s == pytest.approx(50.0 + 39.0)
    assert ledger.cached_compiles_s == pytest.approx(3.0)
    assert ledger.process_starts_s == pytest.approx(6.0)
    assert ledger.warm_ups_s == pytest.approx(1.0 + 2.0 + 2.0 + 1.0)  # their compiles apart
    assert ledger.timed_steps_s == pytest.approx(14.0)
    assert ledger.configs == 4  # the skipped trial measured nothing
    parts = sum(getattr(ledger, name) for name, _ in LEDGER_PARTS)
    assert parts == pytest.approx(300.0)
    assert ledger.other_s == pytest.approx(300.0 - 89.0 - 3.0 - 6.0 - 6.0 - 14.0 - 100.5)


def test_on_a_cpu_another_micro_batch_of_a_code_compiles_from_the_cache() -> None:
    records = [
        _record(0, COMPILED, warmup_s=52.0, timed_s=6.0, compile_s=50.0),
        _record(1, COMPILED.replace(micro_batch=16, grad_accum=2), warmup_s=6.0, compile_s=5.0),
    ]
    figures = dict(total_s=100.0, trials_s=80.0, race_s=0.0, writing_s=0.0)
    cpu = ledger_of(records, **figures, device_kind="cpu")
    assert (cpu.first_compiles, cpu.cached_compiles_s) == (1, pytest.approx(5.0))
    cuda = ledger_of(records, **figures, device_kind="cuda")  # compiled per micro-batch there
    assert (cuda.first_compiles, cuda.cached_compiles_s) == (2, 0.0)


def test_a_trial_stopped_while_compiling_counts_its_time_as_a_compile() -> None:
    # a newcomer's trial stopped at the compile cap after 113 s went to "other"
    stopped = TrialRecord(
        number=0,
        state="PRUNED",
        status="stopped",
        config=COMPILED.to_dict(),
        ran=True,
        wall_s=113.0,
        overhead_s=3.0,
    )
    eager_stopped = TrialRecord(
        number=1, state="PRUNED", status="stopped", config=EAGER.to_dict(), ran=True, wall_s=9.0
    )
    before_ready = TrialRecord(  # a compiled trial stopped in its imports: no process start
        number=2, state="FAIL", status="timeout", config=COMPILED.to_dict(), ran=True, wall_s=7.0
    )
    ledger = ledger_of(
        [stopped, eager_stopped, before_ready],
        total_s=137.0,
        trials_s=130.0,
        race_s=0.0,
        writing_s=0.0,
        device_kind="cpu",
    )
    assert (ledger.first_compiles, ledger.first_compiles_s) == (1, pytest.approx(110.0))
    assert ledger.process_starts_s == pytest.approx(3.0)
    assert ledger.other_s == pytest.approx(24.0)  # the eager one, the one never ready
    assert ledger.configs == 0


def test_a_config_measured_twice_counts_once() -> None:
    again = [_record(0, EAGER, timed_s=4.0), _record(1, EAGER, timed_s=4.0)]
    ledger = ledger_of(
        again, total_s=10.0, trials_s=10.0, race_s=0.0, writing_s=0.0, device_kind="cpu"
    )
    assert ledger.configs == 1 and ledger.timed_steps_s == pytest.approx(8.0)


def test_the_line_names_every_part_and_the_configs() -> None:
    ledger = TimeLedger(
        total_s=340.4, trials_s=180.0, configs=15, first_compiles=1, first_compiles_s=57.0,
        cached_compiles_s=3.4, process_starts_s=23.0, warm_ups_s=11.0, timed_steps_s=78.0,
        race_s=160.0, writing_s=0.1, other_s=7.9,
    )  # fmt: skip
    line = ledger.line()
    assert line.startswith("Time: 340 s, 15 configs measured; first compiles (1) 57 s, ")
    assert line.endswith("the race 160 s, writing 0 s, other 8 s")
    assert all(label in line for _, label in LEDGER_PARTS)
    assert ledger.to_dict()["race_s"] == 160.0


def test_a_search_returns_its_ledger_in_the_json(tmp_path: Path) -> None:
    result = run(tmp_path, FakeBurst(), trials=4)
    assert result.ledger is not None
    data = result.to_dict()["ledger"]
    assert data["configs"] == result.counts()["measured"]
    assert data["total_s"] == pytest.approx(result.wall_s, abs=0.01)
    assert data["race_s"] > 0 and data["trials_s"] > 0
    assert sum(data[name] for name, _ in LEDGER_PARTS) == pytest.approx(data["total_s"], abs=0.1)


def test_a_ledger_reads_back_from_its_dict_and_refuses_anything_else() -> None:
    records = [_record(0, EAGER, overhead_s=1.0, warmup_s=1.0, timed_s=8.0)]
    ledger = ledger_of(
        records, total_s=20.0, trials_s=12.0, race_s=6.0, writing_s=0.1, device_kind="cpu"
    )
    again = TimeLedger.from_dict(ledger.to_dict())
    assert again is not None and again.to_dict() == ledger.to_dict()
    assert TimeLedger.from_dict(None) is None
    assert TimeLedger.from_dict({"total_s": 3.0}) is None  # a field missing
    assert TimeLedger.from_dict(["total_s"]) is None
