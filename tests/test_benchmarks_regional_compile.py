"""benchmarks/regional_compile.py: each burst on an empty cache of its own, the ratios."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.machine.compile_cache import CACHE_ENV
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("regional_compile")


def test_each_burst_compiles_into_an_empty_cache_of_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CACHE_ENV, "/the/users/own")
    seen: list[tuple[str, bool, bool]] = []

    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        cache = os.environ[CACHE_ENV]
        seen.append(
            (cache, Path(cache).is_dir() and not any(Path(cache).iterdir()), config.compile_regions)
        )
        per_block = config.compile_regions
        return BurstResult(
            status="ok",
            compile_s=30.0 if per_block else 60.0,
            tokens_per_s=80.0 if per_block else 100.0,
        )

    monkeypatch.setattr(bench, "run_burst", fake_burst)
    assert bench.measure("mu", "per block", steps=2) == (30.0, 80.0)
    assert bench.measure("mu", "whole model", steps=2) == (60.0, 100.0)
    assert [(empty, regions) for _, empty, regions in seen] == [(True, True), (True, False)]
    assert len({cache for cache, _, _ in seen}) == 2
    assert not any(Path(cache).exists() for cache, _, _ in seen)  # removed after each
    assert os.environ[CACHE_ENV] == "/the/users/own"  # the user's setting is back


def test_the_table_gives_per_block_over_whole_for_compile_and_throughput() -> None:
    cells = {
        ("mu", "whole model"): [(60.0, 100.0), (64.0, 110.0)],
        ("mu", "per block"): [(30.0, 80.0), (None, None)],  # a burst that failed
    }
    text = bench.table(cells)
    ratio_row = next(line for line in text.splitlines() if "per block / whole" in line)
    assert "0.48x" in ratio_row and "0.76x" in ratio_row  # 30/62 and 80/105


def test_a_stop_mid_run_prints_what_was_measured_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def fake_measure(model: str, scope: str, **kw: Any) -> tuple[float, float]:
        calls.append(scope)
        if len(calls) == 2:
            raise KeyboardInterrupt()  # Ctrl-C
        return 10.0, 100.0

    monkeypatch.setattr(bench, "measure", fake_measure)
    assert bench.main(["--models", "mu", "--rounds", "2"]) == 130
    out, err = capsys.readouterr()
    assert "interrupted (Ctrl-C)" in err and "not a full run" in err
    assert "| mu" in out and len(calls) == 2
