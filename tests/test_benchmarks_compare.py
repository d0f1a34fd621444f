"""benchmarks/compare.py's building blocks: the policies' configs, the batch finders, the
measurement of a row and the table. Fake bursts only: fast, no training."""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
from benchmark_modules import load_benchmark

from autotune.burst.result import BurstResult
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.core.device_caps import DeviceCaps
from autotune.core.errors import UsageError
from autotune.models.registry import builtin_names, get_model
from autotune.study.plan.playbook import fit_global_batch
from autotune.testing.fake_caps import cpu_caps, cuda_caps

compare = load_benchmark("compare")
common = load_benchmark("_common")


# -- the guides' configs ----------------------------------------------------------------
NAIVE_MICRO = {"mu": 4, "gpt": 2, "pointer-gen": 1, "text-regressor": 8}


@pytest.mark.parametrize("name", builtin_names())
def test_naive_is_the_guides_start_at_the_models_global_batch(name: str) -> None:
    spec = get_model(name)
    recipe = compare.naive_config(spec, global_batch=spec.global_batch, seq_len=spec.seq_len)
    config = recipe.config
    assert config.micro_batch == NAIVE_MICRO[spec.family]
    assert config.global_batch == spec.global_batch
    assert (config.precision, config.compile, config.num_workers) == ("fp32", "off", 0)
    assert not config.activation_checkpointing
    assert config.seq_len == spec.seq_len
    check_config(config, spec=spec, device=cpu_caps())
    if spec.family == "pointer-gen":
        assert config.grad_accum == 16  # the guide's 1 x 16
    assert recipe.notes == ()  # every guide's numbers fit the model's global batch


@pytest.mark.parametrize("name", builtin_names())
@pytest.mark.parametrize(
    "caps", [cpu_caps(), cpu_caps(bf16_native=True), cuda_caps()], ids=["cpu", "amx", "cuda"]
)
def test_hand_tuned_keeps_the_global_batch_and_runs_on_the_device(
    name: str, caps: DeviceCaps
) -> None:
    spec = get_model(name)
    config = compare.hand_tuned_config(
        spec, caps, global_batch=spec.global_batch, seq_len=spec.seq_len
    ).config
    assert config.global_batch == spec.global_batch
    check_config(config, spec=spec, device=caps)


def _hand(name: str, caps: DeviceCaps, **kw: Any) -> tuple[TrainConfig, str]:
    spec = get_model(name)
    kw.setdefault("global_batch", spec.global_batch)
    recipe = compare.hand_tuned_config(spec, caps, seq_len=spec.seq_len, **kw)
    return recipe.config, "\n".join(recipe.notes)


def test_hand_tuned_mu_and_pointer_gen() -> None:
    mu, notes = _hand("mu", cpu_caps())
    assert (mu.micro_batch, mu.grad_accum, mu.precision, mu.num_workers) == (8, 4, "fp32", 0)
    assert notes == ""
    pg, notes = _hand("pointer-gen", cpu_caps())
    assert (pg.micro_batch, pg.grad_accum, pg.num_workers) == (4, 4, 2)
    assert notes == ""


def test_hand_tuned_gpt_drops_what_the_device_cannot_run() -> None:
    gpu, notes = _hand("gpt-small", cuda_caps())
    assert (gpu.precision, gpu.compile) == ("bf16", "default")
    assert (gpu.micro_batch, gpu.grad_accum) == (8, 4)  # nanoGPT's 12 -> a divisor of 32
    assert "micro-batch 12 does not divide the global batch 32; used 8" in notes
    assert "dropped" not in notes
    amx, notes = _hand("gpt-small", cpu_caps(bf16_native=True))
    assert (amx.precision, amx.compile) == ("bf16", "default")
    plain, notes = _hand("gpt-small", cpu_caps(bf16_native=False, compile=False))
    assert (plain.precision, plain.compile) == ("fp32", "off")
    assert "dropped bf16 autocast" in notes and "no bf16 units" in notes
    assert "dropped torch.compile" in notes


def test_hand_tuned_text_regressor_tf32_only_on_ampere() -> None:
    gpu, notes = _hand("text-regressor", cuda_caps())
    assert (gpu.precision, gpu.activation_checkpointing, gpu.num_workers) == ("tf32", True, 2)
    assert "dropped" not in notes
    cpu, notes = _hand("text-regressor", cpu_caps())
    assert (cpu.precision, cpu.activation_checkpointing, cpu.num_workers) == ("fp32", True, 2)
    assert "dropped TF32" in notes and "tf32" in notes


def test_a_different_global_batch_is_kept_and_noted() -> None:
    mu, notes = _hand("mu", cpu_caps(), global_batch=16)
    assert (mu.micro_batch, mu.grad_accum) == (8, 2)
    assert "the guide's 8 x 4 = 32 samples per step; kept the global batch 16" in notes
    spec = get_model("pointer-gen")
    naive = compare.naive_config(spec, global_batch=8, seq_len=256).config
    assert (naive.micro_batch, naive.grad_accum, naive.seq_len) == (1, 8, 256)


def test_fit_global_batch() -> None:
    assert fit_global_batch(12, None, 32, what="x")[:2] == (8, 4)
    assert fit_global_batch(5, None, 30, what="x") == (5, 6, [])
    assert fit_global_batch(64, None, 16, what="x")[:2] == (16, 1)


# -- the batch finders ------------------------------------------------------------------
def _fits_up_to(limit: int, tried: list[int]) -> Callable[[int], Any]:
    def probe(micro: int) -> Any:
        tried.append(micro)
        return compare.Probe(micro_batch=micro, fits=micro <= limit, wall_s=1.0)

    return probe


@pytest.mark.parametrize(
    ("limit", "power_tries", "halve_tries", "found"),
    [
        (8, [1, 2, 4, 8, 16], [32, 16, 8], 8),
        (32, [1, 2, 4, 8, 16, 32], [32], 32),
        (0, [1], [32, 16, 8, 4, 2, 1], None),
        (5, [1, 2, 4, 8], [32, 16, 8, 4], 4),  # memory limit between two powers of two
    ],
)
def test_power_doubles_and_halving_halves(
    limit: int, power_tries: list[int], halve_tries: list[int], found: int | None
) -> None:
    tried: list[int] = []
    power = compare.find_largest_power(_fits_up_to(limit, tried), 32)
    assert (power.micro_batch, tried) == (found, power_tries)
    assert power.wall_s == len(power_tries)
    assert "Lightning" in power.policy
    tried = []
    halve = compare.find_largest_halving(_fits_up_to(limit, tried), 32)
    assert (halve.micro_batch, tried) == (found, halve_tries)
    assert "Accelerate" in halve.policy


def test_batch_candidates_are_powers_of_two_dividing_the_global_batch() -> None:
    assert compare.batch_candidates(32) == [1, 2, 4, 8, 16, 32]
    assert compare.batch_candidates(24) == [1, 2, 4, 8]
    assert compare.batch_candidates(1) == [1]


def _fake_accelerate(factor: float) -> types.ModuleType:
    """The contract of accelerate.utils.find_executable_batch_size: call with batch_size,
    reduce it on an exception ``should_reduce_batch_size`` accepts, give up at zero."""

    def should_reduce(exc: Exception) -> bool:
        texts = ("CUDA out of memory.", "DefaultCPUAllocator: can't allocate memory")
        return isinstance(exc, RuntimeError) and any(t in exc.args[0] for t in texts)

    def find_executable_batch_size(
        function: Callable[..., Any] | None = None, starting_batch_size: int = 128
    ) -> Any:
        if function is None:
            return functools.partial(
                find_executable_batch_size, starting_batch_size=starting_batch_size
            )
        size = starting_batch_size

        def wrapper(*args: Any) -> Any:
            nonlocal size
            while True:
                if size == 0:
                    raise RuntimeError("No executable batch size found, reached zero.")
                try:
                    return function(size, *args)
                except Exception as exc:
                    if not should_reduce(exc):
                        raise
                    size = int(size * factor)

        return wrapper

    utils = types.ModuleType("accelerate.utils")
    utils.find_executable_batch_size = find_executable_batch_size  # type: ignore[attr-defined]
    return utils


@pytest.mark.parametrize("factor", [0.5, 0.9])  # older and newer Accelerate
def test_the_accelerate_adapter_drives_our_probes(
    monkeypatch: pytest.MonkeyPatch, factor: float
) -> None:
    accelerate = types.ModuleType("accelerate")
    monkeypatch.setitem(sys.modules, "accelerate", accelerate)
    monkeypatch.setitem(sys.modules, "accelerate.utils", _fake_accelerate(factor))
    tried: list[int] = []
    found = compare.find_largest_accelerate(_fits_up_to(8, tried), 32, device_kind="cpu")
    assert found.micro_batch == 8
    assert tried == [32, 16, 8]  # sizes between are rounded down to a divisor, probed once
    tried = []
    none = compare.find_largest_accelerate(_fits_up_to(0, tried), 32, device_kind="cuda")
    assert none.micro_batch is None and tried == [32, 16, 8, 4, 2, 1]


def _burst(
    *,
    status: str = "ok",
    tokens_per_s: float | None = 1000.0,
    peak: int | None = 10**9,
    compile_s: float | None = None,
    reason: str = "",
) -> BurstResult:
    return BurstResult(
        status=status,  # type: ignore[arg-type]
        reason=reason,
        tokens_per_s=tokens_per_s if status == "ok" else None,
        samples_per_s=1.0 if status == "ok" else None,
        step_time_median_s=2.0 if status == "ok" else None,
        compile_s=compile_s,
        peak_memory_bytes=peak,
        wall_s=3.0,
    )


def test_a_burst_probe_fits_only_ok_and_within_the_budget() -> None:
    spec = get_model("gpt-small")
    calls: list[TrainConfig] = []

    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        calls.append(config)
        assert kw["budget_bytes"] == 850 and kw["steps"] + kw["warmup"] == 3
        if config.micro_batch >= 16:
            return _burst(status="oom", peak=None, reason="out of memory")
        return _burst(peak=config.micro_batch * 100)  # ok, but 8 -> 800, 16 -> 1600

    base = compare.naive_config(spec, global_batch=32, seq_len=64).config
    probe = compare.burst_probe(
        spec, base, burst_fn=fake_burst, budget_bytes=850, device="cpu", caps=None,
        seed=0, timeout_s=10, log=lambda _: None,
    )  # fmt: skip
    found = compare.find_largest_power(probe, 32)
    assert found.micro_batch == 8
    assert [c.global_batch for c in calls] == [32] * 5  # accumulation keeps the global batch
    assert [p.fits for p in found.probes] == [True, True, True, True, False]
    assert found.probes[-1].detail.startswith("oom")

    def over_budget(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        return _burst(peak=config.micro_batch * 300)  # "ok" but over 850 from 4 up

    probe = compare.burst_probe(
        spec, base, burst_fn=over_budget, budget_bytes=850, device="cpu", caps=None,
        seed=0, timeout_s=10, log=lambda _: None,
    )  # fmt: skip
    found = compare.find_largest_power(probe, 32)
    assert found.micro_batch == 2
    assert "over the budget" in found.probes[-1].detail


# -- measuring and the table -----------------------------------------------------------
SETTINGS = compare.MeasureSettings(steps=3, warmup=1, repeats=2, device="cpu", seed=0, timeout_s=9)


def _mu_config(micro: int) -> TrainConfig:
    return TrainConfig(micro_batch=micro, grad_accum=32 // micro, seq_len=128)


def test_summarize_takes_the_better_median_and_the_larger_peak() -> None:
    m = compare.summarize(
        [_burst(tokens_per_s=100.0, peak=5, compile_s=3.0), _burst(tokens_per_s=120.0, peak=3)],
        spec=get_model("mu"),
        config=_mu_config(4),
        caps=None,
        capped=True,
    )
    assert m.ok and m.throughput == 120.0 and m.peak_memory_bytes == 5 and m.compile_s == 3.0
    assert m.throughputs == (100.0, 120.0)
    assert m.spread == pytest.approx(20 / 120)
    failed = compare.summarize(
        [_burst(tokens_per_s=100.0), _burst(status="nan", reason="loss is nan")],
        spec=get_model("mu"),
        config=_mu_config(4),
        caps=None,
        capped=True,
    )
    assert (failed.status, failed.reason, failed.ok) == ("nan", "loss is nan", False)


def test_mfu_against_the_bf16_peak_when_the_device_knows_it() -> None:
    spec = get_model("gpt-small")
    caps = dataclasses.replace(cuda_caps(), peak_flops_bf16=1e15)
    m = compare.summarize(
        [_burst()], spec=spec, config=_mu_config(4).replace(seq_len=256), caps=caps, capped=True
    )
    assert m.mfu_bf16 == pytest.approx(spec.flops_per_sample(256) * 1.0 / 1e15)
    assert compare.summarize([_burst()], spec=spec, config=_mu_config(4), caps=cuda_caps(),
                             capped=True).mfu_bf16 is None  # fmt: skip


def test_measure_rows_interleaves_shares_and_uncaps() -> None:
    calls: list[tuple[int, int | None]] = []

    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        calls.append((config.micro_batch, kw["budget_bytes"]))
        if config.micro_batch == 4 and kw["budget_bytes"] is not None:
            return _burst(status="oom", peak=None, reason="over 10 bytes")  # naive: over budget
        if config.micro_batch == 1:
            return _burst(status="crash", reason="segfault")
        return _burst(tokens_per_s=float(len(calls)), peak=config.micro_batch)

    rows = [
        compare.Row(policy="naive", config=_mu_config(4), uncap_if_over=True),
        compare.Row(policy="largest-batch", config=_mu_config(8)),
        compare.Row(policy="autotune", config=_mu_config(8)),  # the same config
        compare.Row(policy="grid", config=_mu_config(1)),
        compare.Row(policy="hand-tuned", skipped="no guide"),
    ]
    compare.measure_rows(
        get_model("mu"), rows, burst_fn=fake_burst, settings=SETTINGS, budget_bytes=10,
        log=lambda _: None,
    )  # fmt: skip
    # round 1 forward (the naive config out of budget: again uncapped), round 2 backward,
    # the crashed config not again, the uncapped one uncapped from then on
    assert calls == [(4, 10), (4, None), (8, 10), (1, 10), (8, 10), (4, None)]
    naive, largest, autotune, grid, hand = rows
    assert naive.measurement.ok and not naive.measurement.capped
    assert naive.fits(10) is False and "measured without the cap" in naive.notes[0]
    assert largest.measurement is autotune.measurement
    assert largest.measurement.throughputs == (3.0, 5.0)
    assert "the same config as largest-batch" in autotune.notes[0]
    assert grid.measurement.status == "crash" and len(grid.measurement.throughputs) == 0
    assert hand.measurement is None


def test_measure_rows_marks_each_burst_as_ours_on_the_watch() -> None:
    """Found on an H200: unmarked, compare.py's own bursts read as "the GPU was 25% busy
    between our bursts" (NVML listed no process there, so utilization was all it had)."""
    from autotune.study.session.watch import MachineWatch

    watch = MachineWatch(device="cpu", processes=lambda: [], steal=lambda: None)
    inside: list[int] = []

    def fake_burst(spec: Any, config: TrainConfig, **kw: Any) -> BurstResult:
        inside.append(watch._bursts)
        return _burst(tokens_per_s=1.0, peak=1)

    rows = [compare.Row(policy="naive", config=_mu_config(4))]
    compare.measure_rows(
        get_model("mu"), rows, burst_fn=fake_burst, settings=SETTINGS, budget_bytes=10,
        log=lambda _: None, watch=watch,
    )  # fmt: skip
    assert inside == [1] * SETTINGS.repeats and watch._bursts == 0


def _row(policy: str, tp: float | None, *, peak: int = 10**9, **kw: Any) -> Any:
    m = None
    if tp is not None:
        m = compare.Measurement(
            status="ok",
            throughput=tp,
            throughputs=(tp, tp * 0.9),
            step_time_median_s=1.5,
            compile_s=kw.pop("compile_s", None),
            peak_memory_bytes=peak,
            capped=kw.pop("capped", True),
        )
    config = TrainConfig(micro_batch=4, grad_accum=8, seq_len=128)
    return compare.Row(policy=policy, config=config, measurement=m, **kw)


def test_the_table_shows_ratios_fits_and_search_time() -> None:
    rows = [
        _row("naive", 100.0, notes=["naive: a note"]),
        _row("hand-tuned", 150.0, peak=9 * 10**9, capped=False),
        _row("autotune", 250.0, search_s=125.0, compile_s=12.0),
        compare.Row(policy="grid", skipped="skipped: 144 configs (--grid-max 48)"),
    ]
    table = compare.render_rows(rows, unit="tokens/s", budget_bytes=8 * 10**9)
    lines = table.splitlines()
    assert (
        lines[0].startswith("| policy") and "tokens/s" in lines[0] and "fits 7.45 GiB" in lines[0]
    )
    by_policy = {line.split("|")[1].strip(): line for line in lines[2:6]}
    assert "1.00x" in by_policy["naive"] and "| yes" in by_policy["naive"]
    assert (
        "1.50x" in by_policy["hand-tuned"] and "no (measured uncapped)" in by_policy["hand-tuned"]
    )
    assert "2.50x" in by_policy["autotune"] and "2 min 05 s" in by_policy["autotune"]
    assert "12 s" in by_policy["autotune"]  # compile time, on its own
    assert "10.0%" in by_policy["autotune"]  # spread of the repeats
    assert "skipped: 144 configs" in by_policy["grid"]
    assert "- naive: a note" in table
    data = rows[2].to_dict(8 * 10**9, compare.naive_throughput(rows))
    assert data["ratio_to_naive"] == 2.5 and data["fits_budget"] is True


def test_no_ratio_without_a_naive_figure() -> None:
    table = compare.render_rows([_row("autotune", 250.0)], unit="samples/s", budget_bytes=8 * 10**9)
    assert "samples/s" in table and "x |" not in table


def test_render_table_pads_aligns_and_escapes() -> None:
    text = common.render_table(["a", "bb"], [["x|y", "1"], ["z", "1234"]], align="lr")
    assert text.splitlines() == [
        "| a    |   bb |",
        "|------|-----:|",
        "| x\\|y |    1 |",
        "| z    | 1234 |",
    ]
    with pytest.raises(ValueError, match="row has 1 cells"):
        common.render_table(["a", "b"], [["x"]])


def test_formats() -> None:
    assert common.fmt_float(12345.6) == "12,346" and common.fmt_float(0.1234) == "0.123"
    assert common.fmt_float(None) == "-" and common.fmt_ratio(2.0) == "2.00x"
    assert common.fmt_seconds(0.4123) == "0.412 s" and common.fmt_seconds(245) == "4 min 05 s"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "nope", "--budget", "8GB", "--device", "cpu"], "unknown model"),
        (["--model", "mu", "--budget", "8GB", "--policies", "fastest"], "--policies"),
        (["--model", "mu", "--budget", "8GB", "--steps", "0"], "--steps must be >= 1"),
        (["--model", "mu", "--budget", "8GB", "--policies", "autotune-held"], "--hold"),
        (["--model", "mu", "--budget", "8GB", "--hold", "loss"], "--hold"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: Any) -> None:
    assert compare.main(argv) == 2
    assert message in capsys.readouterr().err


def test_held_knobs_are_the_model_s_own_at_their_defaults() -> None:
    spec = get_model("gpt-small")

    def args(*argv: str) -> Any:
        return compare._parser().parse_args(["--model", "gpt-small", "--budget", "8GB", *argv])

    held = compare.held_knobs(spec, args("--hold", "loss, checkpoint_every"))
    assert held == {"loss": "full", "checkpoint_every": 1}
    with pytest.raises(UsageError) as e:
        compare.held_knobs(spec, args("--hold", "block_group"))  # mu's, not gpt's
    assert "no knob 'block_group'" in str(e.value) and "loss" in str(e.value)
    with pytest.raises(UsageError, match="--knob sets it too"):
        compare.held_knobs(spec, args("--hold", "loss", "--knob", "loss=chunked"))


def test_the_held_row_searches_with_those_knobs_fixed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import autotune.study as study
    from autotune.core.errors import AutotuneError

    seen: dict[str, Any] = {}

    def fake_search(spec: Any, *, budget: int, **records: Any) -> Any:
        for record in records.values():  # search_options' records
            seen.update({n: getattr(record, n) for n in ("knobs", "output") if hasattr(record, n)})
        raise AutotuneError("stopped here")

    monkeypatch.setattr(study, "search", fake_search)
    spec = get_model("gpt-small")
    args = compare._parser().parse_args(
        ["--model", "gpt-small", "--budget", "8GB", "--knob", "precision=bf16"]
    )
    task = compare.Task(
        args=args, spec=spec, profile=None, caps=cpu_caps(), budget=8 * 10**9,
        global_batch=32, seq_len=256, out=tmp_path,
    )  # fmt: skip
    row = compare._autotune_row(task, held={"loss": "full", "checkpoint_every": 1})
    assert row.policy == "autotune-held" and "stopped here" in row.skipped
    assert list(seen["knobs"]) == ["precision=bf16", "loss=full", "checkpoint_every=1"]
    assert str(seen["output"]).endswith("preset-held.yaml")
    plain = compare._autotune_row(task)
    assert plain.policy == "autotune" and list(seen["knobs"]) == ["precision=bf16"]
