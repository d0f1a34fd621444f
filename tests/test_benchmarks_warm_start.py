"""benchmarks/warm_start.py: the switch each burst runs with, and warm over fresh."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from autotune.burst.result import BurstResult
from autotune.burst.zygote import SWITCH_ENV
from autotune.config.train_config import TrainConfig
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("warm_start")


def test_a_fresh_burst_turns_warm_start_off_and_a_warm_one_leaves_it_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SWITCH_ENV, "users-own")
    seen: list[str | None] = []

    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        seen.append(os.environ.get(SWITCH_ENV))
        return BurstResult(status="ok", wall_s=1.0)

    monkeypatch.setattr(bench, "run_burst", fake_burst)
    bench.burst("mu naive", "fresh", steps=1)
    bench.burst("mu compiled", "warm", steps=1)
    assert seen == ["0", None]
    assert os.environ[SWITCH_ENV] == "users-own"  # the user's setting is back


def test_the_table_gives_warm_over_fresh_for_wall_and_throughput() -> None:
    def ok(wall: float, rate: float) -> BurstResult:
        return BurstResult(status="ok", wall_s=wall, compile_s=1.0, tokens_per_s=rate)

    cells = {
        ("mu compiled", "fresh"): [ok(6.0, 100.0), ok(6.4, 110.0)],
        ("mu compiled", "warm"): [ok(3.1, 104.0), BurstResult(status="crash", wall_s=None)],
    }
    ratio_row = next(line for line in bench.table(cells).splitlines() if "warm / fresh" in line)
    assert "0.50x" in ratio_row and "0.99x" in ratio_row  # 3.1/6.2 and 104/105


def test_a_stop_mid_run_prints_what_was_measured_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def fake_burst(case: str, start: str, **kw: Any) -> BurstResult:
        calls.append(case)
        if len(calls) == 6:  # after the 4 untimed bursts and 1 timed one
            raise KeyboardInterrupt(143)  # what the SIGTERM handler raises
        return BurstResult(status="ok", wall_s=1.0, tokens_per_s=100.0)

    monkeypatch.setattr(bench, "burst", fake_burst)
    before = signal.getsignal(signal.SIGTERM)
    assert bench.main(["--rounds", "2"]) == 143
    out, err = capsys.readouterr()
    assert "interrupted (SIGTERM)" in err and "not a full run" in err
    assert "| mu naive" in out and len(calls) == 6
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back
