"""benchmarks/model_knobs.py: the variants' configs, the table's ratios, bad arguments."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from autotune.burst.result import BurstResult
from autotune.config.train_config import TrainConfig
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("model_knobs")


def test_each_variant_changes_only_its_own_knobs() -> None:
    base = bench.config_for("gpt-small", "base", "bf16")
    assert (base.precision, base.compile, base.knobs) == ("bf16", "off", {"attention": "eager"})
    chunked = bench.config_for("gpt-small", "compile+loss=chunked", "bf16")
    assert chunked.compile == "default"
    assert chunked.knobs == {"attention": "eager", "loss": "chunked"}
    every = bench.config_for("mu", "checkpointing+every=2", "fp32")
    assert every.activation_checkpointing and every.knobs["checkpoint_every"] == 2
    assert every.micro_batch * every.grad_accum == base.global_batch


def test_a_burst_that_failed_counts_as_no_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        if config.knobs.get("loss") == "chunked":
            return BurstResult(status="oom", reason="over budget")
        return BurstResult(status="ok", tokens_per_s=100.0, peak_memory_bytes=2**30)

    monkeypatch.setattr(bench, "run_burst", fake_burst)
    assert bench.measure("mu", bench.config_for("mu", "base", "bf16"), steps=2) == (100.0, 2**30)
    assert bench.measure("mu", bench.config_for("mu", "loss=chunked", "bf16"), steps=2) == (
        None,
        None,
    )


def test_the_table_gives_each_variant_against_the_base() -> None:
    cells = {
        ("gpt-small", "base"): [(100.0, 1000), (110.0, 1000), (90.0, 1000)],
        ("gpt-small", "loss=chunked"): [(150.0, 500), (None, None), (160.0, 600)],
    }
    rows = bench.table(cells).splitlines()
    chunked = next(line for line in rows if "loss=chunked" in line)
    assert "155" in chunked and "1.55x" in chunked  # median 155 over the base's 100
    assert "0.55x" in chunked  # peak 550 over 1000
    assert "150, -, 160" in chunked


@pytest.mark.parametrize(
    "argv",
    [
        ["--variants", "loss=chunked,base"],
        ["--models", "resnet"],
        ["--rounds", "0"],
        ["--budget", "lots"],
        ["--device", "cuda:7"],  # no such device here
    ],
)
def test_bad_arguments_are_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2


def test_a_stop_mid_run_prints_what_was_measured_and_exits_non_zero(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[str] = []

    def fake_measure(model: str, config: TrainConfig, **kw: Any) -> Any:
        calls.append(model)
        if len(calls) == 2:
            raise KeyboardInterrupt(143)  # what the SIGTERM handler raises
        return 100.0, 2**30

    monkeypatch.setattr(bench, "measure", fake_measure)
    before = signal.getsignal(signal.SIGTERM)
    assert bench.main(["--models", "gpt-small", "--rounds", "2"]) == 143
    out, err = capsys.readouterr()
    assert "interrupted (SIGTERM)" in err and "not a full run" in err
    assert "| gpt-small | base" in out and len(calls) == 2
    assert signal.getsignal(signal.SIGTERM) is before  # the caller's handler is back


def test_a_real_sigterm_during_the_rounds_prints_the_partial_table_and_exits_143(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import os

    common = load_benchmark("_common")
    cells: dict[str, list[int]] = {"a": [], "b": []}

    def rounds() -> None:
        cells["a"].append(1)
        os.kill(os.getpid(), signal.SIGTERM)  # handled before the next bytecode
        cells["b"].append(2)

    before = signal.getsignal(signal.SIGTERM)
    assert common.run_rounds_then_table(rounds, cells, lambda: f"table {cells}") == 143
    out, err = capsys.readouterr()
    assert "table {'a': [1], 'b': []}" in out and "interrupted (SIGTERM)" in err
    assert signal.getsignal(signal.SIGTERM) is before
