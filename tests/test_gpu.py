"""On a real CUDA GPU (marker ``gpu``; skipped with the reason where there is none).

A real out-of-memory burst classified ``oom`` with the parent alive; the
per-process cap holding at the budget; the CUDA peak being the allocator's reserved peak
plus the context; bf16/fp16/tf32 steps keeping fp32's loss, float8 linear layers bf16's;
a compiled burst; a trial forked by a zygote. Item 1: each CUDA knob runs a real burst.
The same knobs are unit-tested on a CPU with hand-made CUDA capabilities in
tests/test_cuda_knobs.py (float8 in tests/test_fp8.py).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_conv import CONV
from fake_models import FAKES

from autotune.burst.result import BurstResult
from autotune.burst.supervisor import run_burst
from autotune.burst.zygote import _driver_loaded, zygotes
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.machine.hardware import probe
from autotune.models.registry import get_model, load_model

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs an NVIDIA GPU (torch.cuda)"),
]

GiB = 2**30
DEVICE = "cuda:0"


def fake(name: str, **args: Any) -> ModelSpec:
    spec = load_model(f"{FAKES}:{name}")
    return spec.with_args(**args) if args else spec


def conv(**args: Any) -> ModelSpec:
    spec = load_model(f"{CONV}:conv_spec")
    return spec.with_args(**args) if args else spec


def tiny_gpt() -> ModelSpec:
    """A gpt small enough to compile in seconds; 16-wide heads (flash and cuDNN take them)."""
    return get_model("gpt-small").with_args(vocab_size=256, d_model=64, n_layers=2, n_heads=4)


def card_bytes() -> int:
    return int(torch.cuda.get_device_properties(0).total_memory)


def burst(spec: ModelSpec, config: TrainConfig, **kwargs: Any) -> BurstResult:
    kwargs.setdefault("steps", 3)
    kwargs.setdefault("warmup", 1)
    kwargs.setdefault("timeout_s", 300)
    return run_burst(spec, config, device=DEVICE, **kwargs)


# -- out of memory, the cap, the peak ------------------------------------------------------


def test_a_real_cuda_oom_is_classified_oom_and_the_parent_goes_on() -> None:
    too_much = 2 * card_bytes()  # one allocation twice the card: a real allocator failure
    spec = fake("alloc_spec", alloc_bytes=too_much, sleep_s=0.0)
    result = burst(spec, TrainConfig(micro_batch=2, seq_len=16))
    assert result.status == "oom", result.reason
    assert "out of memory" in result.reason.lower()
    # The parent is alive and unharmed: its own CUDA works and the next trial runs.
    assert float(torch.ones(4, device=DEVICE).sum().item()) == 4.0
    after = burst(fake("fake_spec"), TrainConfig(micro_batch=2, seq_len=16))
    assert after.status == "ok", after.reason


def test_the_cap_holds_a_growing_trial_at_the_budget() -> None:
    budget = 3 * GiB
    # Each forward keeps 512 MiB more: 10 steps would need 5 GiB.
    spec = fake("alloc_spec", alloc_bytes=512 * 2**20, sleep_s=0.0)
    result = burst(spec, TrainConfig(micro_batch=2, seq_len=16), steps=10, budget_bytes=budget)
    assert result.status == "oom", result.reason
    assert result.peak_memory_bytes is not None and result.peak_memory_bytes <= budget
    assert "capped" in result.memory_source
    fits = burst(fake("fake_spec"), TrainConfig(micro_batch=2, seq_len=16), budget_bytes=budget)
    assert fits.status == "ok", fits.reason
    assert fits.peak_memory_bytes is not None and fits.peak_memory_bytes <= budget


def test_cuda_peak_is_the_reserved_peak_plus_the_context(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    spec = conv(record_file=str(record), width=64)
    result = burst(spec, TrainConfig(micro_batch=32, seq_len=32), steps=4, warmup=2)
    assert result.status == "ok", result.reason
    context = result.cuda_context_bytes
    assert context is not None and context > 0
    reserved = json.loads(record.read_text())["max_reserved"]  # in the trial, at its last forward
    assert reserved > 0
    assert result.peak_memory_bytes is not None
    # The last step reuses the cached blocks of the earlier ones (at most one new 2 MiB
    # segment for a small allocation).
    assert 0 <= result.peak_memory_bytes - (reserved + context) <= 2 * 2**20
    assert result.memory_source.startswith("cuda: peak reserved + context")


# -- numerics ---------------------------------------------------------------------------


def _losses(
    precision: str, *, steps: int = 30, device: str = DEVICE, **changes: Any
) -> list[float]:
    """``steps`` optimizer steps of tiny gpt on four fixed batches, from the same seed,
    through the step the burst and the trainer run (``autotune.engine.step``), with the
    config's other ``changes``."""
    from autotune.engine.step import Stepper, apply_backend_flags, make_optimizer, prepare_model

    spec = tiny_gpt()
    config = TrainConfig(micro_batch=8, seq_len=64, precision=precision, **changes)
    where = torch.device(device)
    torch.manual_seed(0)
    model = prepare_model(spec, config, where)
    optimizer = make_optimizer(model, config, lr=3e-3)
    apply_backend_flags(config, where)
    stepper = Stepper(model, optimizer, config=config, device=where, loss_fn=spec.loss_fn)
    gen = torch.Generator().manual_seed(1)
    batches = [
        spec.make_batch(batch_size=8, seq_len=64, generator=gen, device=where) for _ in range(4)
    ]
    losses = [stepper.step([batches[i % 4]]).loss_value() for i in range(steps)]
    apply_backend_flags(TrainConfig(micro_batch=1, seq_len=1), where)  # the flags are global
    return losses


@pytest.mark.parametrize(
    ("precision", "tolerance"), [("bf16", 0.08), ("fp16", 0.08), ("tf32", 0.02)]
)
def test_low_precision_keeps_the_fp32_loss(precision: str, tolerance: float) -> None:
    caps = probe().device(DEVICE)
    if caps.precision_problem(precision) is not None:
        pytest.skip(caps.precision_problem(precision) or "")
    reference = _losses("fp32")
    losses = _losses(precision)
    assert reference[-1] < reference[0] - 0.1  # it learns at all
    assert all(torch.isfinite(torch.tensor(losses)))
    assert abs(losses[-1] - reference[-1]) <= tolerance, (losses[-1], reference[-1])


def test_fp8_linears_are_torchaos_float8_layers_and_keep_the_bf16_loss() -> None:
    """On a card with FP8 tensor cores and torchao (else skipped with the reason): the build
    swaps the blocks' linear layers for torchao's ``Float8Linear`` (the tied head is no
    layer of its own), and eager float8 steps learn as bf16 does."""
    caps = probe().device(DEVICE)
    if (problem := caps.fp8_problem()) is not None:
        pytest.skip(problem)
    from torchao.float8.float8_linear import Float8Linear

    from autotune.engine.step import prepare_model

    config = TrainConfig(micro_batch=8, seq_len=64, precision="bf16", fp8_linears=True)
    model = prepare_model(tiny_gpt(), config, torch.device(DEVICE))
    swapped = [name for name, m in model.named_modules() if isinstance(m, Float8Linear)]
    assert len(swapped) == 8 and all(name.startswith("layers.") for name in swapped)
    reference = _losses("bf16")
    losses = _losses("bf16", fp8_linears=True)
    assert losses[-1] < losses[0] - 0.1  # it learns
    assert abs(losses[-1] - reference[-1]) <= 0.1, (losses[-1], reference[-1])


# -- compile and each CUDA knob in a real burst --------------------------------------------


def test_a_compiled_burst_on_cuda() -> None:
    config = TrainConfig(micro_batch=4, seq_len=64, precision="bf16", compile="default")
    result = burst(tiny_gpt(), config, warmup=2, timeout_s=600)
    assert result.status == "ok", result.reason
    assert result.compile_s is not None and result.warmup_s is not None
    assert result.recompiles in (0, None)


KNOB_BURSTS = {
    "fused_optimizer": (tiny_gpt, {"fused_optimizer": True}),
    "expandable_segments": (conv, {"expandable_segments": True}),
    "cudnn_benchmark": (conv, {"cudnn_benchmark": True}),
    "channels_last": (conv, {"channels_last": True, "cudnn_benchmark": True}),
    "reduce-overhead": (tiny_gpt, {"compile": "reduce-overhead"}),
    "max-autotune-no-cudagraphs": (tiny_gpt, {"compile": "max-autotune-no-cudagraphs"}),
    "sdpa math": (tiny_gpt, {"knobs": {"sdpa_backend": "math"}}),
    "sdpa efficient": (tiny_gpt, {"knobs": {"sdpa_backend": "efficient"}}),
    "sdpa flash": (tiny_gpt, {"knobs": {"sdpa_backend": "flash"}}),
    "sdpa cudnn": (tiny_gpt, {"knobs": {"sdpa_backend": "cudnn"}}),
    # compute capability 8.9+ and torchao, else skipped with the refusal; compiled, as it runs
    "fp8_linears": (tiny_gpt, {"fp8_linears": True, "compile": "default"}),
}


@pytest.mark.parametrize("name", list(KNOB_BURSTS))
def test_each_cuda_knob_runs_a_real_burst(name: str, tmp_path: Path) -> None:
    make, changes = KNOB_BURSTS[name]
    spec = make(record_file=str(tmp_path / "record.json")) if make is conv else make()
    seq_len = 16 if make is conv else 64
    # flash and cuDNN attention run in half precision only: bf16 where the card has it.
    config = TrainConfig(micro_batch=4, seq_len=seq_len, precision="bf16", **changes)
    caps = probe().device(DEVICE)
    if caps.precision_problem("bf16") is not None:
        config = config.replace(precision="fp16")
    try:
        check_config(config, spec=spec, device=caps)
    except Exception as exc:  # a card too old for this knob: the refusal is the answer
        pytest.skip(str(exc))
    result = burst(spec, config, timeout_s=600)
    assert result.status == "ok", result.reason
    assert all(torch.isfinite(torch.tensor(result.losses)))
    if make is conv:
        seen = json.loads((tmp_path / "record.json").read_text())
        assert seen["input_channels_last"] is config.channels_last
        assert seen["weight_channels_last"] is config.channels_last
        if config.expandable_segments:
            assert "expandable_segments:True" in (seen["alloc_conf"] or "")


def test_expandable_segments_are_on_in_the_trial_and_not_in_the_parent(tmp_path: Path) -> None:
    record = tmp_path / "record.json"
    config = TrainConfig(micro_batch=4, seq_len=16, expandable_segments=True)
    result = burst(conv(record_file=str(record)), config)
    assert result.status == "ok", result.reason
    assert "expandable_segments:True" in json.loads(record.read_text())["alloc_conf"]
    assert "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")


# -- warm start -------------------------------------------------------------------------------


@pytest.mark.parametrize("compile_mode", ["off", "default"])
def test_a_cuda_trial_is_forked_by_a_zygote_that_never_started_cuda(
    tmp_path: Path, compile_mode: str
) -> None:
    """A one-process CUDA trial comes from a zygote (``autotune.burst.zygote``), eager or
    compiled (its zygote's check ran a kernel Inductor made): the check in a fork passed,
    the trials ran on the GPU, and the zygote itself never loaded the CUDA driver, so that
    every later fork can start CUDA too."""
    facts = tmp_path / "process.json"
    spec = conv(process_file=str(facts))
    config = TrainConfig(micro_batch=2, seq_len=8, compile=compile_mode)
    parents = []
    for _ in range(2):  # the second from the same zygote
        result = burst(spec, config, steps=1, warmup=0)
        assert result.status == "ok", result.reason
        parents.append(json.loads(facts.read_text())["ppid"])
    assert parents[0] == parents[1] and parents[0] in zygotes.pids(), zygotes.failures()
    assert not _driver_loaded(Path(f"/proc/{parents[0]}/maps").read_text())
