"""benchmarks/dynamic_batch.py: each mode on its own emptied cache, the rounds alternating
which goes first, and dynamic / static from the medians."""

from __future__ import annotations

from typing import Any

import pytest

from tests.benchmark_modules import load_benchmark

bench = load_benchmark("dynamic_batch")


def test_each_mode_compiles_on_its_own_cache_and_the_table_compares_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[int, bool]] = []

    def fake_measure(model: str, mb: int, dynamic: bool, precision: str, steps: int) -> dict:
        calls.append((mb, dynamic))
        rate = {8: 1000.0, 16: 1100.0}[mb] * (0.9 if dynamic else 1.0)
        compile_s = 3.0 if dynamic and mb == 16 else 50.0  # the cache serves dynamic code
        return {"compile_s": compile_s, "tokens_per_s": rate}

    caches: list[str] = []

    class FakeCache:
        def __init__(self, prefix: str) -> None:
            caches.append(prefix)

        def __enter__(self) -> str:
            return "/nowhere"

        def __exit__(self, *exc: Any) -> None:
            return None

    monkeypatch.setattr(bench, "measure", fake_measure)
    monkeypatch.setattr(bench, "empty_compile_cache", FakeCache)
    monkeypatch.setattr(bench, "probe", lambda: None, raising=False)
    monkeypatch.setattr(bench, "hardware_lines", lambda profile, device: ["cpu: fake"])
    assert bench.main(["--rounds", "2"]) == 0
    # round 1 static first, round 2 dynamic first; micro-batch A then B on each cache
    static, dynamic = [(8, False), (16, False)], [(8, True), (16, True)]
    assert calls == static + dynamic + dynamic + static
    assert caches == [
        "dynbatch-static-",
        "dynbatch-dynamic-",
        "dynbatch-dynamic-",
        "dynbatch-static-",
    ]
    out = capsys.readouterr().out
    dynamic_row = next(line for line in out.splitlines() if line.startswith("| dynamic / static"))
    assert dynamic_row.count("0.90x") == 2
    mode_row = next(line for line in out.splitlines() if line.startswith("| dynamic  "))
    assert [cell.strip() for cell in mode_row.split("|")[2:4]] == ["50 s", "3 s"]
