"""benchmarks/quick_start.py: the configs it measures, its rounds' order, bad arguments."""

from __future__ import annotations

from typing import Any

import pytest

from autotune.config.train_config import TrainConfig
from autotune.testing.fake_caps import cpu_caps
from tests.benchmark_modules import load_benchmark

bench = load_benchmark("quick_start")


def test_the_quick_start_is_measured_with_each_choice_undone_beside_the_finders_pick() -> None:
    named = bench.variants("mu", cpu_caps(bf16_native=True), 2)
    pick, quick = named["the finders' pick"], named["quick start"]
    assert next(iter(named)) == "the finders' pick"  # the table's base
    assert (pick.micro_batch, pick.grad_accum, pick.precision) == (32, 1, "fp32")
    assert pick.knobs["attention"] == "sdpa" and pick.knobs["loss"] == "full"
    assert (quick.micro_batch, quick.precision, quick.compile) == (32, "bf16", "off")
    undone = {
        label: c for label, c in named.items() if label not in ("the finders' pick", "quick start")
    }
    assert set(undone) == {"attention=sdpa", "loss=full", "fp32", "micro-batch 8"}
    for label, config in undone.items():  # each differs from the quick start in one choice
        moved = {k for k, v in config.to_dict().items() if v != quick.to_dict()[k]}
        assert moved in ({"knobs"}, {"precision"}, {"micro_batch", "grad_accum"}), label
    # without bf16 units the quick start is the fp32 one, its knobs at their defaults
    plain = bench.variants("mu", cpu_caps(bf16_native=False), 2)
    assert set(plain) == {"the finders' pick", "quick start", "micro-batch 8"}


def test_each_round_measures_every_config_in_a_rotated_order(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[TrainConfig] = []

    def fake_measure(model: str, config: TrainConfig, **kw: Any) -> Any:
        seen.append(config)
        return 100.0 * config.micro_batch, 2**30

    monkeypatch.setattr(bench, "measure", fake_measure)
    assert bench.main(["--models", "mu", "--rounds", "2"]) == 0
    n = len(seen) // 2
    assert seen[:n] != seen[n:] and sorted(map(repr, seen[:n])) == sorted(map(repr, seen[n:]))
    out = capsys.readouterr().out
    assert "| mu    | the finders' pick |" in out and "vs base" in out


@pytest.mark.parametrize("argv", [["--models", "resnet"], ["--rounds", "0"], ["--budget", "lots"]])
def test_bad_arguments_are_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
