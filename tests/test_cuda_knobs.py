"""The CUDA knobs: fused AdamW, compile max-autotune-no-cudagraphs, the SDPA
backend, expandable segments, cuDNN autotuning and channels-last for convolutional models.

On a CPU, with hand-made CUDA capabilities: the space offers each only where the device
and the model support it and refuses it elsewhere with the reason, ``check_config``
refuses what cannot run, and each knob reaches the step (the built optimizer, the model's
and the input's layout, the SDPA kernel selected inside the forward, the allocator setting
in a burst child's environment). The same knobs on a real GPU are in tests/test_gpu.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_conv import CONV
from fake_presets import gpu_fingerprint, make_config, make_preset

from autotune.burst.supervisor import run_burst
from autotune.burst.trial import _build
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.core.device_caps import DeviceCaps
from autotune.core.errors import ConfigError, UsageError
from autotune.engine import step as step_module
from autotune.engine.step import (
    ALLOC_CONF_VAR,
    Stepper,
    allocator_conf,
    apply_allocator_settings,
    compile_model,
    prepare_model,
)
from autotune.models.registry import get_model, load_model
from autotune.preset.export import export_preset
from autotune.preset.io import preset_from_dict, preset_to_dict
from autotune.study.plan.playbook import playbook_config
from autotune.study.plan.space import BUILTIN_KNOBS, CUDA_KNOBS, SearchSpace, parse_knob_args
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.toy import toy_spec

CPU = torch.device("cpu")
# fp8_linears also needs compute capability 8.9 and torchao (tests/test_fp8.py)
CONV_CUDA_KNOBS = tuple(name for name in CUDA_KNOBS if name != "fp8_linears")


def conv_spec(**args: Any) -> ModelSpec:
    spec = load_model(f"{CONV}:conv_spec")
    return spec.with_args(**args) if args else spec


def tiny_gpt() -> ModelSpec:
    return get_model("gpt-small").with_args(vocab_size=64, d_model=32, n_layers=1, n_heads=2)


def turing() -> DeviceCaps:
    """A GPU of compute capability 7.5: fp16, no bf16, no flash attention."""
    from dataclasses import replace

    return replace(cuda_caps(ampere=False), compute_capability=(7, 5), name="Test T4")


# -- the space: offered only where supported ------------------------------------------------


def test_cpu_space_gains_no_cuda_dimension() -> None:
    for spec in (toy_spec(), conv_spec(), tiny_gpt()):
        space = SearchSpace.for_model(spec, cpu_caps(), cpu_count=2)
        names = [name for name, _ in space.dimensions()]
        model_knobs = [f"knobs.{k.name}" for k in spec.knobs if k.name != "sdpa_backend"]
        assert names == [*BUILTIN_KNOBS, "omp_spin", *model_knobs]  # the CPU's own switch
        assert space.cuda_knobs() == ()
        assert "max-autotune-no-cudagraphs" not in space.compile
        for config in (space.naive(), space.guess(), space.smallest()):
            assert not any(getattr(config, name) for name in CUDA_KNOBS)
            assert "sdpa_backend" not in config.knobs


def test_cuda_space_turns_fused_adamw_and_expandable_segments_for_every_model() -> None:
    space = SearchSpace.for_model(toy_spec(), cuda_caps(), cpu_count=2)
    assert space.cuda_knobs() == ("fused_optimizer", "expandable_segments")
    assert space.fused_optimizer == (False, True)
    assert space.cudnn_benchmark == (False,) and space.channels_last == (False,)
    assert "max-autotune-no-cudagraphs" in space.compile


def test_cuda_space_turns_cudnn_and_channels_last_for_a_convolutional_model() -> None:
    space = SearchSpace.for_model(conv_spec(), cuda_caps(), cpu_count=2)
    assert space.cuda_knobs() == CONV_CUDA_KNOBS
    guess = space.guess()  # a hand-tuner's first try on CUDA
    assert guess.fused_optimizer and guess.cudnn_benchmark and guess.channels_last
    assert not guess.expandable_segments
    naive = space.naive()
    assert not any(getattr(naive, name) for name in CUDA_KNOBS)


def test_sdpa_backend_choices_follow_the_compute_capability() -> None:
    ampere = SearchSpace.for_model(tiny_gpt(), cuda_caps(), cpu_count=2)
    assert ampere.knobs["sdpa_backend"] == ("auto", "math", "flash", "efficient", "cudnn")
    older = SearchSpace.for_model(tiny_gpt(), turing(), cpu_count=2)
    assert older.knobs["sdpa_backend"] == ("auto", "math", "efficient")
    cpu = SearchSpace.for_model(tiny_gpt(), cpu_caps(), cpu_count=2)
    assert "sdpa_backend" not in cpu.knobs


@pytest.mark.parametrize(
    ("caps", "spec", "knob", "reason"),
    [
        (cpu_caps(), toy_spec(), "fused_optimizer=true", "only searched on a CUDA device"),
        (cpu_caps(), toy_spec(), "expandable_segments=on", "only searched on a CUDA device"),
        (cuda_caps(), toy_spec(), "channels_last=true", "only searched for a convolutional"),
        (cuda_caps(), toy_spec(), "cudnn_benchmark=true", "'toy' is not one"),
        (cpu_caps(), toy_spec(), "compile=max-autotune-no-cudagraphs", "needs a CUDA device"),
        (cpu_caps(), tiny_gpt(), "sdpa_backend=math", "searched on a CUDA device only"),
        (turing(), tiny_gpt(), "sdpa_backend=flash", "compute capability 8.0 or newer"),
        (turing(), tiny_gpt(), "knobs.sdpa_backend=cudnn", "Test T4 is 7.5"),
    ],
)
def test_knob_restrictions_refuse_with_the_reason(
    caps: DeviceCaps, spec: ModelSpec, knob: str, reason: str
) -> None:
    with pytest.raises(UsageError, match=reason):
        SearchSpace.for_model(spec, caps, cpu_count=2, restrict=parse_knob_args([knob]))


def test_an_unknown_knob_lists_the_cuda_knobs_of_the_space() -> None:
    with pytest.raises(UsageError, match="did you mean 'fused_optimizer'") as info:
        SearchSpace.for_model(
            tiny_gpt(), cuda_caps(), restrict=parse_knob_args(["fused_optimiser=true"])
        )
    assert "expandable_segments" in str(info.value) and "sdpa_backend" in str(info.value)


def test_knob_restrictions_pick_cuda_knobs() -> None:
    restrict = parse_knob_args(["fused_optimizer=true", "sdpa_backend=flash,math"])
    space = SearchSpace.for_model(tiny_gpt(), cuda_caps(), cpu_count=2, restrict=restrict)
    assert space.fused_optimizer == (True,)
    assert space.knobs["sdpa_backend"] == ("math", "flash")
    assert space.naive().fused_optimizer  # the only value left
    conv = SearchSpace.for_model(
        conv_spec(), cuda_caps(), restrict=parse_knob_args(["channels_last=true"])
    )
    assert conv.channels_last == (True,) and conv.cudnn_benchmark == (False, True)


def test_every_cuda_config_passes_check_config_and_round_trips_through_optuna() -> None:
    import optuna

    spec = conv_spec()
    caps = cuda_caps()
    space = SearchSpace.for_model(spec, caps, cpu_count=1, restrict={"precision": ["bf16"]})
    configs = list(space.grid())
    assert len(configs) == space.size() and len({space.key(c) for c in configs}) == len(configs)
    for config in configs:
        check_config(config, spec=spec, device=caps)
        assert space.contains(config)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study()
    for config in configs[-4:]:
        study.enqueue_trial(space.params_of(config))
        trial = study.ask()
        assert space.suggest(trial) == config
        study.tell(trial, 1.0)


def test_a_cuda_knob_outside_the_space_is_not_contained() -> None:
    cpu = SearchSpace.for_model(tiny_gpt(), cpu_caps(), cpu_count=2)
    assert not cpu.contains(cpu.naive().replace(fused_optimizer=True))
    assert not cpu.contains(cpu.naive().replace(knobs={"sdpa_backend": "math"}))
    assert cpu.contains(cpu.naive().replace(knobs={**cpu.naive().knobs, "sdpa_backend": "auto"}))


def test_neighbours_flip_each_cuda_knob() -> None:
    space = SearchSpace.for_model(conv_spec(), cuda_caps(), cpu_count=2)
    naive = space.naive()
    flipped = {
        name
        for n in space.neighbours(naive, workers=False, kernels=True)
        for name in CUDA_KNOBS
        if getattr(n, name)
    }
    assert flipped == set(CONV_CUDA_KNOBS)


# -- check_config ---------------------------------------------------------------------------


def test_check_config_refuses_what_cannot_run_with_one_line_each() -> None:
    config = TrainConfig(
        micro_batch=2,
        seq_len=16,
        channels_last=True,
        expandable_segments=True,
        knobs={"sdpa_backend": "flash"},
    )
    with pytest.raises(ConfigError) as info:
        check_config(config, spec=tiny_gpt(), device=cpu_caps())
    problems = info.value.problems
    assert any(p.startswith("config.channels_last: model 'gpt-small' is not") for p in problems)
    assert any(
        p.startswith("config.expandable_segments:") and "needs a CUDA device" in p for p in problems
    )
    assert "config.knobs.sdpa_backend: sdpa_backend=flash needs a CUDA device" in "\n".join(
        problems
    )
    assert len(problems) == 3
    with pytest.raises(ConfigError, match=r"compute capability 8\.0 or newer"):
        check_config(config.replace(channels_last=False), spec=tiny_gpt(), device=turing())


def test_check_config_accepts_what_runs() -> None:
    gpt = TrainConfig(micro_batch=2, seq_len=16, knobs={"sdpa_backend": "math"})
    check_config(gpt, spec=tiny_gpt(), device=cpu_caps())  # math runs everywhere
    check_config(
        gpt.replace(
            expandable_segments=True, fused_optimizer=True, knobs={"sdpa_backend": "cudnn"}
        ),
        spec=tiny_gpt(),
        device=cuda_caps(),
    )
    conv = TrainConfig(micro_batch=2, seq_len=8, channels_last=True, cudnn_benchmark=True)
    check_config(conv, spec=conv_spec(), device=cuda_caps())
    check_config(conv.replace(cudnn_benchmark=False), spec=conv_spec(), device=cpu_caps())


# -- each knob reaches the step -------------------------------------------------------------


def test_fused_optimizer_reaches_the_optimizer_the_burst_builds() -> None:
    spec = conv_spec()
    for fused in (True, False):
        config = TrainConfig(micro_batch=2, seq_len=8, fused_optimizer=fused)
        built = _build(spec, config, CPU)
        stepper = built.stepper
        assert bool(built.optimizer.defaults.get("fused")) is fused
        batch = spec.make_batch(batch_size=2, seq_len=8)
        assert torch.isfinite(stepper.step([batch]).loss)  # the fused CPU kernel runs


def test_channels_last_reaches_the_model_and_the_input_of_the_step(tmp_path: Path) -> None:
    for on in (True, False):
        record = tmp_path / f"record-{on}.json"
        spec = conv_spec(record_file=str(record))
        config = TrainConfig(micro_batch=2, seq_len=8, channels_last=on)
        built = _build(spec, config, CPU)
        model, stepper = built.model, built.stepper
        weight = model.conv.weight  # type: ignore[union-attr]
        assert weight.is_contiguous(memory_format=torch.channels_last) is on
        stepper.step([spec.make_batch(batch_size=2, seq_len=8)])  # an NCHW batch
        seen = json.loads(record.read_text())
        assert seen["input_channels_last"] is on and seen["weight_channels_last"] is on


def _record_sdpa(monkeypatch: pytest.MonkeyPatch) -> list[list[Any]]:
    from torch.nn import functional
    from torch.nn.attention import _cur_sdpa_kernel_backends

    seen: list[list[Any]] = []
    real = functional.scaled_dot_product_attention

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(list(_cur_sdpa_kernel_backends()))
        return real(*args, **kwargs)

    monkeypatch.setattr(functional, "scaled_dot_product_attention", recording)
    return seen


@pytest.mark.parametrize("model", ["gpt-small", "mu"])
def test_sdpa_backend_selects_the_kernel_inside_the_step(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.nn.attention import SDPBackend

    if model == "gpt-small":
        spec = tiny_gpt()
    else:
        spec = get_model(model).with_args(vocab_size=64, n_layers=1, n_heads=2, mlp_hidden=64)
    seen = _record_sdpa(monkeypatch)
    for backend in ("math", "auto"):
        config = TrainConfig(micro_batch=2, seq_len=16, knobs={"sdpa_backend": backend})
        stepper = _build(spec, config, CPU).stepper
        seen.clear()
        out = stepper.step([spec.make_batch(batch_size=2, seq_len=16)])
        assert torch.isfinite(out.loss) and seen
        if backend == "math":
            assert all(kernels == [SDPBackend.MATH] for kernels in seen)
        else:
            assert all(len(kernels) > 1 for kernels in seen)  # torch's own choice


def test_a_bad_sdpa_backend_fails_when_the_model_is_built() -> None:
    with pytest.raises(ValueError, match="sdpa_backend must be one of"):
        tiny_gpt().build_fn(**{**tiny_gpt().args, "sdpa_backend": "fast"})


def test_compile_mode_reaches_torch_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    modes: list[Any] = []
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: modes.append(mode) or model)
    model = torch.nn.Linear(2, 2)
    for mode in ("max-autotune-no-cudagraphs", "reduce-overhead", "default"):
        compile_model(model, TrainConfig(micro_batch=1, seq_len=1, compile=mode))
    assert modes == ["max-autotune-no-cudagraphs", "reduce-overhead", None]


def test_allocator_conf_adds_expandable_segments_and_keeps_the_rest() -> None:
    on = TrainConfig(micro_batch=1, seq_len=1, expandable_segments=True)
    off = on.replace(expandable_segments=False)
    assert allocator_conf(on, None) == "expandable_segments:True"
    assert (
        allocator_conf(on, "max_split_size_mb:64,expandable_segments:False")
        == "max_split_size_mb:64,expandable_segments:True"
    )
    assert allocator_conf(off, "max_split_size_mb:64") == "max_split_size_mb:64"
    assert allocator_conf(off, None) is None


def test_expandable_segments_reach_the_trainer_and_presetloop_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import os

    from autotune.train.loop import PresetLoop

    # setenv first, so that monkeypatch restores the variable (absent) after the test;
    # and this process's own allocator is left alone where CUDA runs in it (a GPU session).
    monkeypatch.setenv(ALLOC_CONF_VAR, "")
    monkeypatch.delenv(ALLOC_CONF_VAR)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    PresetLoop(TrainConfig(micro_batch=1, seq_len=1))

    assert ALLOC_CONF_VAR not in os.environ
    PresetLoop(TrainConfig(micro_batch=1, seq_len=1, expandable_segments=True))
    assert os.environ[ALLOC_CONF_VAR] == "expandable_segments:True"
    monkeypatch.delenv(ALLOC_CONF_VAR)
    apply_allocator_settings(TrainConfig(micro_batch=1, seq_len=1, expandable_segments=True))
    assert os.environ[ALLOC_CONF_VAR] == "expandable_segments:True"
    assert step_module.apply_allocator_settings is apply_allocator_settings  # the trainer's
    # the process's other allocator settings kept (a burst's trial applies it the same way)
    monkeypatch.setenv(ALLOC_CONF_VAR, "max_split_size_mb:64")
    apply_allocator_settings(TrainConfig(micro_batch=1, seq_len=1, expandable_segments=True))
    assert os.environ[ALLOC_CONF_VAR] == "max_split_size_mb:64,expandable_segments:True"


def test_a_burst_child_runs_with_expandable_segments_and_channels_last(tmp_path: Path) -> None:
    """Through a real burst (its own process): the allocator setting is in the child's
    environment when the model runs, and the step's input and weights are channels-last.
    (The child never checks the device: on a CPU the allocator setting is inert, which is
    what lets this run here.) The trial sets it itself, so the burst runs in the tests' own
    environment and the zygote the other tests started serves it (a setting of the
    parent's was an environment, so a zygote start, of its own: 3-4 s on the 2-core CPU);
    the parent's other settings kept: test_expandable_segments_reach_the_trainer_and_..."""
    record = tmp_path / "record.json"
    spec = conv_spec(record_file=str(record))
    config = TrainConfig(micro_batch=2, seq_len=8, expandable_segments=True, channels_last=True)
    result = run_burst(spec, config, steps=1, warmup=0, timeout_s=120)
    assert result.status == "ok", result.reason
    seen = json.loads(record.read_text())
    assert seen["alloc_conf"] == "expandable_segments:True"
    assert seen["input_channels_last"] and seen["weight_channels_last"]


# -- presets, export, the playbook --------------------------------------------------------


def test_new_fields_round_trip_through_a_preset_and_old_presets_load() -> None:
    config = make_config(
        fused_optimizer=True,
        expandable_segments=True,
        channels_last=True,
        compile="max-autotune-no-cudagraphs",
        knobs={"sdpa_backend": "flash"},
    )
    preset = make_preset(config=config, fingerprint=gpu_fingerprint())
    data = preset_to_dict(preset)
    assert preset_from_dict(data).config == config
    old = preset_to_dict(make_preset())
    for name in ("channels_last", "expandable_segments"):
        del old["config"][name]
        del old["baseline"]["config"][name]
    loaded = preset_from_dict(old).config
    assert not loaded.channels_last and not loaded.expandable_segments


def test_export_maps_fused_adamw_and_lists_what_does_not_map() -> None:
    config = make_config(fused_optimizer=True, expandable_segments=True, channels_last=True)
    preset = make_preset(config=config, fingerprint=gpu_fingerprint())
    assert export_preset(preset, "hf").data["optim"] == "adamw_torch_fused"  # type: ignore[index]
    for format in ("hf", "lightning", "accelerate", "deepspeed"):
        unmapped = "\n".join(export_preset(preset, format).unmapped)
        assert "config.channels_last=true" in unmapped, format
        assert "expandable_segments:True" in unmapped, format
    lightning = export_preset(preset, "lightning").data
    assert lightning is not None and lightning["optimizer"]["fused"] is True


def test_playbook_uses_fused_adamw_on_cuda_only() -> None:
    spec = conv_spec()
    cuda = playbook_config(SearchSpace.for_model(spec, cuda_caps(), cpu_count=2), spec)
    assert cuda.fused_optimizer and cuda.channels_last and cuda.cudnn_benchmark
    cpu = playbook_config(SearchSpace.for_model(spec, cpu_caps(), cpu_count=2), spec)
    assert not any(getattr(cpu, name) for name in CUDA_KNOBS)


def test_prepare_model_is_what_the_trainer_builds() -> None:
    spec = conv_spec()
    config = TrainConfig(micro_batch=2, seq_len=8, channels_last=True)
    model = prepare_model(spec, config, CPU)
    weight = model.conv.weight  # type: ignore[union-attr]
    assert weight.is_contiguous(memory_format=torch.channels_last)
    stepper = Stepper(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        config=config,
        device=CPU,
        loss_fn=spec.loss_fn,
    )
    assert torch.isfinite(stepper.step([spec.make_batch(batch_size=2, seq_len=8)]).loss)


def test_trial_tables_name_the_cuda_knobs_a_config_turns_on() -> None:
    from autotune.study.trials.records import summarize_config

    config = TrainConfig(micro_batch=2, seq_len=8, fused_optimizer=True, channels_last=True)
    line = summarize_config(config.to_dict())
    assert "fused-adamw" in line and "channels-last" in line
    assert "expandable" not in line and "cudnn" not in line


def test_the_playbook_scales_its_micro_batch_from_the_naive_on_cuda() -> None:
    """On an H200 gpt2-124m's playbook config took mb 64 at 24 GB (its class unmeasured)
    and ran out; scaled from the naive's 4.16 GiB at mb 1 it takes a size that fits."""
    from autotune.models.registry import get_model
    from autotune.study.plan.memory_model import MemoryModel

    spec = get_model("gpt2-124m")
    space = SearchSpace.for_model(spec, cuda_caps(), cpu_count=16, seq_len=[1024])
    memory = MemoryModel(budget_bytes=24 * 10**9, device_kind="cuda")
    unmeasured = playbook_config(space, spec, memory=memory)
    assert unmeasured.micro_batch == max(space.micro_batch)  # nothing known: the largest
    memory.add(0, space.naive(), peak_bytes=int(4.16 * 2**30), infeasible=False,
               context_bytes=708_837_376)  # fmt: skip
    scaled = playbook_config(space, spec, memory=memory)
    assert scaled.precision == "bf16" and scaled.compile != "off"
    assert 1 < scaled.micro_batch <= 8


def test_a_trial_on_cuda_without_an_index_runs_on_the_first_gpu() -> None:
    """``torch.cuda.set_device`` refuses ``cuda`` without an index (a ValueError, every
    trial of a search run with ``device="cuda"`` through the API): the trial names
    ``cuda:0``, the current GPU of a fresh process."""
    import torch

    from autotune.burst.trial import indexed_device

    assert indexed_device("cuda") == torch.device("cuda", 0)
    assert indexed_device("cuda:1") == torch.device("cuda", 1)
    assert indexed_device("cpu") == torch.device("cpu")
