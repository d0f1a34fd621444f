"""benchmarks/model_knobs.py: the variants' configs, the table's ratios, bad arguments."""

from __future__ import annotations

import signal
from pathlib import Path
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


# -- against a preset: a base config and variants given as knob changes ----------------------
def _spec() -> Any:
    from autotune.models.registry import load_model

    return load_model("gpt2-124m")


def test_a_variant_changes_config_fields_and_model_knobs() -> None:
    base = TrainConfig(micro_batch=8, grad_accum=8, seq_len=1024, precision="bf16",
                       compile="default", knobs={"attention": "sdpa"})  # fmt: skip
    config = bench.apply_changes(base, "sdpa_backend=cudnn,fused_optimizer=true", _spec())
    assert config.knobs == {"attention": "sdpa", "sdpa_backend": "cudnn"}
    assert config.fused_optimizer is True and config.compile == "default"
    bigger = bench.apply_changes(
        base, "micro_batch=64,loss=chunked,activation_checkpointing=true,checkpoint_every=2",
        _spec(),
    )  # fmt: skip
    assert (bigger.micro_batch, bigger.grad_accum) == (64, 1)  # the global batch kept
    assert bigger.knobs["checkpoint_every"] == 2 and bigger.activation_checkpointing
    assert bench.apply_changes(base, "compile=off", _spec()).compile == "off"  # not False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("sdpa_backend", "expected name=value"),
        ("warp_drive=on", "'warp_drive' is neither a config field"),
        ("micro_batch=48", "micro_batch 48 does not divide the global batch 64"),
        ("precision=fp8", "config.precision"),
    ],
)
def test_a_variant_that_cannot_be_read_is_a_usage_error(text: str, message: str) -> None:
    from autotune.core.errors import UsageError

    base = TrainConfig(micro_batch=8, grad_accum=8, seq_len=1024)
    with pytest.raises(UsageError, match=message):
        bench.apply_changes(base, text, _spec())


def test_a_preset_plan_leaves_out_what_the_device_refuses_and_the_winner_itself(
    tmp_path: Path,
) -> None:
    from autotune.machine.hardware import probe
    from tests.fake_gpu_suite import write_winner

    path = write_winner(tmp_path / "gpt2-124m.yaml")
    caps = probe().device("cpu")
    spec, labelled, budget, notes = bench.preset_plan(
        str(path), ["compile=default", "sdpa_backend=flash", "loss=chunked"], caps
    )
    assert spec.name == "gpt2-124m" and budget == int(0.9 * 150e9)
    assert [label for label, _ in labelled] == ["winner", "loss=chunked"]
    assert notes[0] == "`compile=default`: the preset's own config"
    assert "`sdpa_backend=flash`: " in notes[1] and "needs a CUDA device" in notes[1]


def test_the_time_limit_starts_no_burst_that_cannot_end_in_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    now = [0.0]
    limit = bench.TimeLimit(limit_s=100.0, clock=lambda: now[0])
    plans = {"mu": [(label, TrainConfig(micro_batch=8, grad_accum=4, seq_len=128))
                    for label in ("winner", "a", "b")]}  # fmt: skip
    cells: dict[tuple[str, str], list[Any]] = {("mu", v): [] for v in ("winner", "a", "b")}
    timeouts: list[float] = []

    def measure_one(model: str, config: TrainConfig, *, timeout_s: float) -> Any:
        timeouts.append(timeout_s)
        now[0] += 30.0  # each burst takes 30 s
        return 100.0, 2**20

    bench.run_rounds(cells, plans, 3, measure_one, limit)
    assert timeouts == [100.0, 70.0, 40.0]  # a fourth would start with 10 s left
    assert [len(v) for v in cells.values()] == [1, 1, 1]
    assert "left 6 burst(s) not run" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv",
    [
        ["--variant", "loss=chunked"],  # without --preset
        ["--preset", "p.yaml", "--models", "mu", "--variant", "loss=chunked"],
        ["--preset", "p.yaml"],  # no variant
        ["--within", "soon"],
        ["--preset", "/nonexistent.yaml", "--variant", "loss=chunked"],
    ],
)
def test_bad_preset_arguments_are_a_usage_error(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2


@pytest.mark.slow  # three real bursts, each a process of its own: 20-100 s on a loaded 2-core VM
def test_a_preset_and_two_variants_measured_for_real(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from autotune.preset import save_preset
    from autotune.preset.sections import ModelRef, Task
    from tests.fake_presets import make_config, make_preset

    tiny = make_preset(
        model=ModelRef(name="mu", args={"n_layers": 1, "vocab_size": 512}),
        task=Task(seq_len=32, global_batch=2), baseline=None,
        config=make_config(micro_batch=2, grad_accum=1, seq_len=32, knobs={"block_group": 2}),
    )  # fmt: skip
    save_preset(tiny, tmp_path / "tiny.yaml")
    argv = ["--preset", str(tmp_path / "tiny.yaml"), "--rounds", "1", "--steps", "2",
            "--warmup", "1", "--variant", "loss=chunked", "--variant", "micro_batch=1"]  # fmt: skip
    assert bench.main(argv) == 0
    rows = {line.split("|")[2].strip(): line for line in capsys.readouterr().out.splitlines()
            if line.startswith("| mu ")}  # fmt: skip
    assert list(rows) == ["winner", "loss=chunked", "micro_batch=1"]
    assert "1.00x" in rows["winner"] and " - " not in rows["loss=chunked"]


def test_the_bursts_run_the_presets_model_with_its_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A preset's model arguments (a smaller mu) reach every burst, the winner's and the
    variants': found when a tiny preset's bursts ran the full-size model."""
    from autotune.preset import save_preset
    from autotune.preset.sections import ModelRef, Task
    from tests.fake_presets import make_config, make_preset

    tiny = make_preset(
        model=ModelRef(name="mu", args={"n_layers": 1, "vocab_size": 512}),
        task=Task(seq_len=32, global_batch=2), baseline=None,
        config=make_config(micro_batch=2, grad_accum=1, seq_len=32, knobs={"block_group": 2}),
    )  # fmt: skip
    save_preset(tiny, tmp_path / "tiny.yaml")
    seen: list[tuple[Any, TrainConfig, float]] = []

    def fake_measure(spec: Any, config: TrainConfig, **kw: Any) -> Any:
        seen.append((spec, config, kw["timeout_s"]))
        return 100.0, 2**20

    monkeypatch.setattr(bench, "measure", fake_measure)
    argv = ["--preset", str(tmp_path / "tiny.yaml"), "--rounds", "1", "--within", "10m",
            "--variant", "loss=chunked"]  # fmt: skip
    assert bench.main(argv) == 0
    assert [c.knobs.get("loss") for _, c, _ in seen] == [None, "chunked"]
    assert all(s.args["n_layers"] == 1 and s.args["vocab_size"] == 512 for s, _, _ in seen)
    assert seen[0][2] <= 600
    assert "| mu    | loss=chunked |" in capsys.readouterr().out
