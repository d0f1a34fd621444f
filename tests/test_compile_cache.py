"""Cheaper trials: one torch.compile cache for a search's bursts and the training run, and
recompilation inside a burst detected and reported."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autotune.burst.result import BurstResult
from autotune.burst.trial_report import BurstProgress
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
    progress = BurstProgress()
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


def _claimed_isas() -> list[Any]:
    from torch._inductor import cpu_vec_isa

    on_cpu = cpu_vec_isa.x86_isa_checker()
    return [
        isa
        for isa in cpu_vec_isa.supported_vec_isa_list
        if all(flag in on_cpu for flag in str(isa).split())
    ]


@pytest.fixture
def isa_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A compile cache of its own, Inductor's ISA setting as torch leaves it, and its check
    replaced by one that counts its calls and finds what ``found`` holds (every claimed
    set unless a test says otherwise)."""
    from torch._inductor import config, cpu_vec_isa

    claimed = _claimed_isas()
    if not claimed:
        pytest.skip("no x86 vector ISA on this CPU")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    state: dict[str, Any] = {"calls": 0, "found": claimed, "config": config.cpp}

    def check() -> list[Any]:
        state["calls"] += 1
        return list(state["found"])

    monkeypatch.setattr(cpu_vec_isa, "valid_vec_isa_list", check)
    with config.patch({"cpp.vec_isa_ok": None}):  # as it was, after
        yield state


def test_the_vector_isa_check_runs_once_per_compile_cache(isa_check: dict[str, Any]) -> None:
    """Inductor checks every claimed ISA in each compiling process (about 1 s of each
    compiled burst): the first process checks and records it, the next ones trust it."""
    from autotune.machine.compile_cache import trust_vector_isa_check

    trust_vector_isa_check()
    assert isa_check["calls"] == 1
    assert isa_check["config"].vec_isa_ok is True
    isa_check["config"].vec_isa_ok = None  # a new process
    trust_vector_isa_check()
    assert isa_check["calls"] == 1
    assert isa_check["config"].vec_isa_ok is True


def test_a_failed_vector_isa_leaves_the_check_to_inductor(isa_check: dict[str, Any]) -> None:
    from autotune.machine.compile_cache import trust_vector_isa_check

    isa_check["found"] = isa_check["found"][1:]  # the best set did not build or load here
    for _ in range(2):
        trust_vector_isa_check()
        assert isa_check["config"].vec_isa_ok is None
    assert isa_check["calls"] == 1  # what it found is recorded all the same


def test_a_record_of_another_torch_or_compiler_is_checked_again(
    isa_check: dict[str, Any], tmp_path: Path
) -> None:
    import json

    from autotune.machine.compile_cache import VECTOR_ISA_FILE, trust_vector_isa_check

    trust_vector_isa_check()
    record_path = tmp_path / "cache" / VECTOR_ISA_FILE
    record = json.loads(record_path.read_text())
    assert record["found"] == [str(isa) for isa in isa_check["found"]]
    for field_name, value in (("torch", "0.0.1"), ("compiler", "/opt/other/g++")):
        isa_check["config"].vec_isa_ok = None
        record_path.write_text(json.dumps({**record, "key": {**record["key"], field_name: value}}))
        calls = isa_check["calls"]
        trust_vector_isa_check()
        assert isa_check["calls"] == calls + 1, field_name
    record_path.write_text("{not json")
    isa_check["config"].vec_isa_ok = None
    trust_vector_isa_check()
    assert isa_check["config"].vec_isa_ok is True


def test_the_users_vector_isa_setting_and_no_cache_folder_are_left_alone(
    isa_check: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from autotune.machine.compile_cache import trust_vector_isa_check

    isa_check["config"].vec_isa_ok = False  # TORCHINDUCTOR_VEC_ISA_OK=0
    trust_vector_isa_check()
    assert isa_check["config"].vec_isa_ok is False and isa_check["calls"] == 0
    isa_check["config"].vec_isa_ok = None
    monkeypatch.delenv(CACHE_ENV)
    trust_vector_isa_check()
    assert isa_check["config"].vec_isa_ok is None and isa_check["calls"] == 0


def test_a_cpu_model_compiled_trusts_the_recorded_vector_isa_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import torch

    from autotune.engine import step

    calls: list[int] = []
    monkeypatch.setattr(step, "trust_vector_isa_check", lambda: calls.append(1))
    step.compile_model(
        torch.nn.Linear(2, 2), TrainConfig(micro_batch=1, seq_len=1, compile="default")
    )
    assert calls == [1]
    step.compile_model(torch.nn.Linear(2, 2), TrainConfig(micro_batch=1, seq_len=1, compile="off"))
    assert calls == [1]


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
    # and what Inductor's check of the CPU's vector ISAs found, for the next burst to trust
    import json

    from autotune.machine.compile_cache import VECTOR_ISA_FILE

    claimed = [str(isa) for isa in _claimed_isas()]
    if claimed:
        record = json.loads((tmp_path / "cache" / VECTOR_ISA_FILE).read_text())
        assert record["key"]["claimed"] == claimed and record["found"] == claimed


def test_a_cache_variable_naming_a_file_is_refused_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # TORCHINDUCTOR_CACHE_DIR=/dev/null failed every burst's build with FileExistsError,
    # and a search's own build with torch's "already registered in mega-cache"
    from autotune.core.errors import UsageError
    from autotune.machine.compile_cache import check_user_cache

    a_file = tmp_path / "cache"
    a_file.write_text("")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(a_file))
    with pytest.raises(UsageError, match=r"TORCHINDUCTOR_CACHE_DIR='.*cache' is not a folder"):
        check_user_cache()
    a_file.unlink()
    check_user_cache()  # missing: Inductor makes it
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    check_user_cache()
