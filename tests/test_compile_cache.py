"""Cheaper trials: one torch.compile cache for a search's bursts and the training run, and
recompilation inside a burst detected and reported."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.burst.outcome import Progress
from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.machine.compile_cache import CACHE_ENV, compile_cache_dir, shared_compile_cache
from autotune.testing.burst import FakeBurst, run

HERE = Path(__file__).parent


@dataclass
class CacheSeen(FakeBurst):
    seen: list[str | None] = field(default_factory=list)

    def __call__(self, spec: ModelSpec, config: TrainConfig, **kw: Any) -> BurstResult:
        self.seen.append(os.environ.get(CACHE_ENV))  # what a burst child would inherit
        return super().__call__(spec, config, **kw)


def test_a_search_points_its_bursts_at_the_runs_folders_compile_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    burst = CacheSeen()
    run(tmp_path, burst, trials=4)
    expected = str(compile_cache_dir(tmp_path / "runs").resolve())
    assert burst.seen and set(burst.seen) == {expected}  # trials and race alike
    assert CACHE_ENV not in os.environ  # restored after the search


def test_torchs_own_default_in_the_environment_is_not_a_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import torch._dynamo`` writes torch's default folder into the environment, and
    the search's probe imports it: the bursts used /tmp/torchinductor_<user>, shared by
    every search on the machine, not the runs folder's."""
    monkeypatch.delenv(CACHE_ENV, raising=False)
    import torch._dynamo  # noqa: F401  (puts torch's default in the environment)

    from autotune.machine.compile_cache import torch_default_dir

    monkeypatch.setenv(CACHE_ENV, torch_default_dir())  # as torch leaves it, import or not
    burst = CacheSeen()
    run(tmp_path, burst, trials=3)
    assert set(burst.seen) == {str(compile_cache_dir(tmp_path / "runs").resolve())}
    assert os.environ[CACHE_ENV] == torch_default_dir()  # torch's value restored after


def test_a_cache_the_user_chose_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "mine"))
    with shared_compile_cache(tmp_path / "runs") as folder:
        assert folder == tmp_path / "mine" and os.environ[CACHE_ENV] == str(folder)
    assert os.environ[CACHE_ENV] == str(tmp_path / "mine")


def test_recompiles_count_graphs_built_during_the_timed_steps() -> None:
    progress = Progress()
    assert progress.recompiles() is None  # no compile
    progress.graphs_after_warmup, progress.graphs = 2, 2
    assert progress.recompiles() == 0
    progress.graphs = 3
    assert progress.recompiles() == 1


@pytest.mark.slow
def test_a_burst_whose_shapes_change_reports_its_recompilation() -> None:
    from autotune.burst.supervisor import run_burst
    from autotune.models.registry import load_model

    spec = load_model(f"{HERE / 'dynamic_shapes_model.py'}:spec")
    config = TrainConfig(micro_batch=4, seq_len=16, compile="default")
    result = run_burst(spec, config, steps=3, warmup=1, timeout_s=300)
    assert result.ok, result.reason
    assert result.recompiles is not None and result.recompiles >= 1
    eager = run_burst(spec, config.replace(compile="off"), steps=3, warmup=1, timeout_s=120)
    assert eager.ok and eager.recompiles is None


def test_the_precompiled_header_is_kept_in_the_compile_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch._inductor import codecache

    from autotune.machine.compile_cache import keep_precompiled_headers

    monkeypatch.setattr(codecache, "_HEADER_DIR", str(tmp_path / "tmp" / "headers"))
    monkeypatch.setattr(codecache, "_HEADER_LOCK_DIR", str(tmp_path / "tmp" / "headers" / "locks"))
    monkeypatch.delenv(CACHE_ENV, raising=False)
    keep_precompiled_headers()  # no cache folder chosen: torch's place is kept
    kept = codecache._HEADER_DIR
    assert kept == str(tmp_path / "tmp" / "headers")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    keep_precompiled_headers()
    headers, locks = codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR
    assert headers == str(tmp_path / "cache" / "precompiled_headers")
    assert locks == str(tmp_path / "cache" / "precompiled_headers" / "locks")


@pytest.mark.slow
def test_a_compiled_burst_leaves_its_precompiled_header_in_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst's temporary folder is removed with it: a header built there was built
    again by every compiled burst (5 s each for mu on the 2-core CPU)."""
    from autotune.burst.supervisor import run_burst
    from autotune.models.registry import load_model

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    spec = load_model(f"{HERE / 'dynamic_shapes_model.py'}:spec")
    config = TrainConfig(micro_batch=4, seq_len=16, compile="default")
    result = run_burst(spec, config, steps=1, warmup=1, timeout_s=300)
    assert result.ok, result.reason
    assert list((tmp_path / "cache" / "precompiled_headers").glob("*.gch"))
