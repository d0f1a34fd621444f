"""benchmarks/search_efficiency.py: its tables from the searches' JSON, the side-by-side
of the picks, bad arguments."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("search_efficiency")

NAIVE = TrainConfig(micro_batch=1, grad_accum=32, seq_len=128)
PICK = TrainConfig(micro_batch=8, grad_accum=4, seq_len=128, compile="default")
LONG_PICK = PICK.replace(micro_batch=16, grad_accum=2)


def _fake_run(
    model: str, budget: str, timeout: str | None, folder: Path, keep: Path | None = None
) -> Any:
    pick = LONG_PICK if timeout == "30m" else PICK
    data = {
        "best": {"config": pick.to_dict()},
        "naive": {"config": NAIVE.to_dict()},
        "speedup": 2.5,
        "race": {"speedup_interval": [2.4, 2.6]},
        "counts": {"ran": 17},
        "wall_s": 351.0,
        "ledger": {"configs": 15, "first_compiles_s": 57.0, "race_s": 120.0},
    }
    return bench.SearchRun(
        model=model, limit=timeout or "default", load_before="0.5", load_after="1.8",
        exit_code=0, data=data,
    )  # fmt: skip


def test_each_search_gives_its_configs_pick_speedup_and_ledger(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[tuple[str, str | None]] = []

    def run(
        model: str, budget: str, timeout: str | None, folder: Path, keep: Path | None = None
    ) -> Any:
        calls.append((model, timeout))
        assert keep is None  # no --keep: nothing kept
        assert folder.exists() and not any(folder.iterdir())  # a fresh folder: empty cache
        return _fake_run(model, budget, timeout, folder)

    monkeypatch.setattr(bench, "run_search", run)
    assert bench.main(["--models", "mu", "gpt-small", "--runs", "2"]) == 0
    assert calls == [("mu", None), ("mu", None), ("gpt-small", None), ("gpt-small", None)]
    out = capsys.readouterr().out
    assert out.count("| mu ") == 4 and "2.50x (2.40-2.60)" in out  # two rows in each table
    assert (
        "first compiles" in out and re.search(r"\|\s+57 \|", out) and re.search(r"\|\s+120 \|", out)
    )
    assert "mb 8x4 seq 128 fp32 compile=default" in out


def test_a_reference_search_is_measured_beside_the_default_picks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(bench, "run_search", _fake_run)
    measured: list[TrainConfig] = []

    def measure(model: str, config: TrainConfig, **kw: Any) -> Any:
        measured.append(config)
        return {16: 2000.0, 8: 1900.0, 1: 800.0}[config.micro_batch], 2**30

    monkeypatch.setattr(bench, "measure", measure)
    argv = ["--models", "mu", "--runs", "1", "--reference", "30m", "--rounds", "2"]
    assert bench.main(argv) == 0
    # the longer search's pick, the default pick and naive, each once a round, rotated
    assert len(measured) == 6 and measured[:3] != measured[3:]
    out = capsys.readouterr().out
    assert "vs 30m search" in out and "0.95x" in out and "0.40x" in out


def test_keep_writes_each_searchs_json_and_progress(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    class Search:
        """``subprocess.Popen`` for an ``autotune search --json`` that prints its result."""

        returncode = 0

        def __init__(self, command: list[str], **kw: Any) -> None:
            assert "--json" in command and kw["cwd"] == tmp_path / "run"

        def __enter__(self) -> Search:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def communicate(self) -> tuple[str, str]:
            return '{"wall_s": 300.0}', "progress lines\n"

    monkeypatch.setattr(bench.subprocess, "Popen", Search)
    (tmp_path / "run").mkdir()
    run = bench.run_search("mu", "8GB", None, tmp_path / "run", keep=tmp_path / "kept")
    assert run.data == {"wall_s": 300.0}
    kept = sorted(p.suffix for p in (tmp_path / "kept").iterdir())
    assert kept == [".json", ".log"]
    assert (next((tmp_path / "kept").glob("mu-*.json"))).read_text() == '{"wall_s": 300.0}'


@pytest.mark.parametrize(
    "argv",
    [
        ["--models", "resnet"], ["--runs", "0"], ["--budget", "lots"], ["--rounds", "0"],
        ["--keep", str(Path(__file__).resolve())],  # a file, not a folder
    ],
)  # fmt: skip
def test_bad_arguments_are_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
