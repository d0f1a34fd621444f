"""benchmarks/verify_compile.py: four bursts on one cache, emptied first, the user's kept."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.machine.compile_cache import CACHE_ENV
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("verify_compile")


def test_four_bursts_share_one_cache_that_starts_empty_and_is_removed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(CACHE_ENV, "/the/users/own")
    seen: list[tuple[str, bool, bool, int]] = []

    def fake_burst(spec: Any, config: TrainConfig, *, verify: bool, **kw: Any) -> BurstResult:
        cache = os.environ[CACHE_ENV]
        seen.append((cache, not any(Path(cache).iterdir()), verify, config.micro_batch))
        (Path(cache) / f"entry{len(seen)}").write_text("x")
        return BurstResult(status="ok", compile_s=50.0 / len(seen), tokens_per_s=100.0)

    monkeypatch.setattr(bench, "run_burst", fake_burst)
    assert bench.main(["--micro-batch", "8"]) == 0
    caches = {c for c, *_ in seen}
    assert len(caches) == 1 and not Path(caches.pop()).exists()  # one cache, removed after
    assert [(empty, verify, mb) for _, empty, verify, mb in seen] == [
        (True, False, 8), (False, False, 8), (False, True, 8), (False, True, 8)
    ]  # fmt: skip
    assert os.environ[CACHE_ENV] == "/the/users/own"
    out = capsys.readouterr().out
    assert "with eval and checkpoint: the eval's graph new" in out and "16.7 s" in out


@pytest.mark.parametrize("micro_batch", ["0", "3", "-8"])
def test_a_micro_batch_that_does_not_divide_the_global_batch_is_a_usage_error(
    micro_batch: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--micro-batch", micro_batch])
    assert exit_.value.code == 2
    assert "a divisor of the global batch 32" in capsys.readouterr().err
