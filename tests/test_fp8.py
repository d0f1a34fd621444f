"""``fp8_linears``: the linear layers in float8 (torchao's float8 training), on a CPU with
hand-made CUDA capabilities and a stand-in torchao.

Offered (searched, accepted) only on a CUDA device of compute capability 8.9+ where torchao
imports and, for a search, torch.compile runs; refused elsewhere with the reason (the
space's ``knobs`` restriction, ``check_config``, a preset's portability check); applied
once, by the build (``place_model``, before the wrapping and the compile), with a filter
that keeps the output head and the layers whose sizes are not multiples of 16 as they are.
The real conversion on a GPU is in tests/test_gpu.py.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Callable
from typing import Any

import pytest
import torch
from fake_models import FAKES
from fake_presets import gpu_fingerprint, make_config, make_gpu, make_preset, make_profile
from torch import nn
from typer.testing import CliRunner

from autotune.burst.trial import _build
from autotune.cli.main import app
from autotune.config.checks import check_config
from autotune.config.train_config import TrainConfig
from autotune.contract.spec import ModelSpec
from autotune.core.errors import ConfigError, HardwareMismatchError, UsageError
from autotune.engine.step import place_model, prepare_model
from autotune.preset import check_portability
from autotune.preset.export import export_preset
from autotune.preset.io import dump_preset, preset_from_dict, preset_to_dict
from autotune.study.plan.space import SearchSpace, parse_knob_args
from autotune.study.trials.records import summarize_config
from autotune.testing.fake_caps import cpu_caps, cuda_caps
from autotune.testing.toy import toy_spec
from autotune.train.loop import PresetLoop

CPU = torch.device("cpu")
HOPPER = cuda_caps(compute_capability=(9, 0))
AMPERE = cuda_caps(compute_capability=(8, 0))
Calls = list[tuple[nn.Module, Callable[[nn.Module, str], bool]]]


@pytest.fixture
def torchao(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """A torchao whose ``convert_to_float8_training`` records what it is given."""
    calls: Calls = []

    def convert_to_float8_training(
        module: nn.Module, *, module_filter_fn: Any = None, config: Any = None
    ) -> nn.Module:
        calls.append((module, module_filter_fn))
        return module

    float8 = types.ModuleType("torchao.float8")
    float8.convert_to_float8_training = convert_to_float8_training  # type: ignore[attr-defined]
    root = types.ModuleType("torchao")
    root.float8 = float8  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torchao", root)
    monkeypatch.setitem(sys.modules, "torchao.float8", float8)
    return calls


@pytest.fixture
def no_torchao(monkeypatch: pytest.MonkeyPatch) -> None:
    """No torchao, whether or not this machine has one (an import of it fails)."""
    monkeypatch.setitem(sys.modules, "torchao", None)
    monkeypatch.setitem(sys.modules, "torchao.float8", None)


class Net(nn.Module):
    """An embedding, a tied projection, a body of linears (one of odd size), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(64, 32)
        self.body = nn.ModuleList([nn.Linear(32, 64), nn.Linear(64, 32)])
        self.odd = nn.Linear(32, 24)  # 24: not a multiple of 16
        self.tied = nn.Linear(32, 64, bias=False)
        self.tied.weight = self.emb.weight
        self.lm_head = nn.Linear(32, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body[1](self.body[0](self.emb(x)))
        return self.lm_head(h).sum() + self.odd(h).sum() + self.tied(h).sum()


def net_spec() -> ModelSpec:
    return dataclasses.replace(
        toy_spec(),
        build_fn=lambda **_: Net(),
        make_batch_fn=lambda a, b, t, g: {"x": torch.zeros(b, t, dtype=torch.long)},
        loss_fn=lambda m, b: m(b["x"]),
    )


def fp8(**changes: Any) -> TrainConfig:
    return TrainConfig(**{"micro_batch": 2, "seq_len": 8, "fp8_linears": True, **changes})


# -- where it is offered ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "reason"),
    [
        (cpu_caps(), "fp8_linears is only searched on a CUDA device"),
        (
            AMPERE,
            r"compute capability 8\.9 or newer: L4, RTX 4090, H100, H200\) and Test GPU is 8\.0",
        ),
        (cuda_caps(), "compute capability 8.9 or newer, and that of Test GPU is unknown"),
    ],
)
def test_fp8_is_not_offered_on_a_cpu_or_before_compute_capability_8_9(
    caps: Any, reason: str, torchao: Calls
) -> None:
    space = SearchSpace.for_model(toy_spec(), caps, cpu_count=2)
    assert space.fp8_linears == (False,) and "fp8_linears" not in space.switches()
    with pytest.raises(UsageError, match=reason):
        SearchSpace.for_model(toy_spec(), caps, restrict=parse_knob_args(["fp8_linears=true"]))
    with pytest.raises(ConfigError, match=r"config\.fp8_linears: float8 linear layers need"):
        check_config(fp8(), spec=toy_spec(), device=caps, cores=2)


def test_fp8_is_offered_on_compute_capability_9_with_torchao(torchao: Calls) -> None:
    space = SearchSpace.for_model(toy_spec(), HOPPER, cpu_count=2)
    assert space.fp8_linears == (False, True)
    assert "fp8_linears" in space.cuda_knobs()
    for start in (space.naive(), space.guess(), space.smallest()):  # off until measured
        assert not start.fp8_linears
    picked = SearchSpace.for_model(
        toy_spec(), HOPPER, restrict=parse_knob_args(["fp8_linears=true"])
    )
    assert picked.fp8_linears == (True,)
    check_config(fp8(compile="default"), spec=toy_spec(), device=HOPPER, cores=2)
    check_config(fp8(), spec=toy_spec(), device=HOPPER, cores=2)  # eager runs (slowly)


def test_fp8_is_only_searched_where_torch_compile_runs(torchao: Calls) -> None:
    no_compile = dataclasses.replace(HOPPER, compile=False, compile_problem="no C compiler")
    space = SearchSpace.for_model(toy_spec(), no_compile, cpu_count=2)
    assert space.fp8_linears == (False,)
    with pytest.raises(UsageError, match=r"searched where torch\.compile runs .* no C compiler"):
        SearchSpace.for_model(
            toy_spec(), no_compile, restrict=parse_knob_args(["fp8_linears=true"])
        )


def test_without_torchao_it_is_refused_with_the_line_that_installs_it(no_torchao: None) -> None:
    space = SearchSpace.for_model(toy_spec(), HOPPER, cpu_count=2)
    assert space.fp8_linears == (False,)
    with pytest.raises(UsageError, match=r"pip install 'autotune-train\[fp8\]'"):
        SearchSpace.for_model(toy_spec(), HOPPER, restrict=parse_knob_args(["fp8_linears=true"]))
    with pytest.raises(ConfigError) as info:
        check_config(fp8(compile="default"), spec=toy_spec(), device=HOPPER, cores=2)
    assert len(info.value.problems) == 1
    (problem,) = info.value.problems
    assert problem.startswith("config.fp8_linears: float8 linear layers need torchao")
    assert problem.endswith("pip install 'autotune-train[fp8]'") and "\n" not in problem


def test_bench_refuses_it_on_a_cpu_before_any_trial() -> None:
    args = ["bench", "--model", f"{FAKES}:fake_spec", "--micro-batch", "2", "--seq-len", "16"]
    result = CliRunner().invoke(app, [*args, "--fp8-linears"])
    assert result.exit_code == 2, result.output
    assert "config.fp8_linears: float8 linear layers need a CUDA device" in result.output
    assert "Traceback" not in result.output


# -- how the build applies it ------------------------------------------------------------------


def test_the_conversion_keeps_the_head_and_the_odd_sizes_as_they_are(torchao: Calls) -> None:
    model = prepare_model(net_spec(), fp8(), CPU)
    ((converted, keep),) = torchao
    assert converted is model
    chosen = [name for name, module in model.named_modules() if keep(module, name)]
    assert chosen == ["body.0", "body.1"]  # not odd (24), tied (the embedding's), lm_head
    assert not keep(model.body, "body")  # a module that is no linear layer
    assert not keep(nn.Linear(32, 64), "head.0")  # under a head of another name


def test_the_burst_and_presetloop_convert_before_the_compile(
    torchao: Calls, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The burst's build and PresetLoop convert once each, before torch.compile sees the
    model (the converted model is the one compiled)."""
    compiled: list[nn.Module] = []
    monkeypatch.setattr(torch, "compile", lambda model, **_: compiled.append(model) or model)
    built = _build(net_spec(), fp8(compile="default"), CPU)
    assert [m for m, _ in torchao] == [built.raw] and compiled == [built.raw]
    model = PresetLoop(fp8(compile="default")).prepare(Net())
    assert len(torchao) == 2 and torchao[1][0] is model and compiled[1] is model
    prepare_model(net_spec(), fp8(fp8_linears=False), CPU)
    assert len(torchao) == 2  # off: no conversion


def test_a_model_with_no_layer_to_convert_is_a_config_error(torchao: Calls) -> None:
    with pytest.raises(ConfigError, match="the model has no linear layer to run in float8"):
        prepare_model(toy_spec(), fp8(), CPU)  # one 4x4 linear
    assert torchao == []


def test_the_build_without_torchao_says_how_to_install_it(no_torchao: None) -> None:
    with pytest.raises(ConfigError, match=r"pip install 'autotune-train\[fp8\]'"):
        place_model(Net(), fp8(), CPU)


# -- presets, portability, exports --------------------------------------------------------------


def hopper_preset(**changes: Any) -> Any:
    config = make_config(precision="bf16", compile="default", **changes)
    return make_preset(config=config, fingerprint=gpu_fingerprint("NVIDIA H100 80GB HBM3", "9.0"))


def test_it_round_trips_through_a_preset_and_older_presets_load_without_it() -> None:
    preset = hopper_preset(fp8_linears=True)
    assert preset_from_dict(preset_to_dict(preset)).config == preset.config
    assert "  fp8_linears: true\n" in dump_preset(preset)
    old = preset_to_dict(hopper_preset())
    del old["config"]["fp8_linears"]
    del old["baseline"]["config"]["fp8_linears"]
    assert preset_from_dict(old).config.fp8_linears is False


def test_the_portability_check_refuses_it_where_it_cannot_run(torchao: Calls) -> None:
    preset = hopper_preset(fp8_linears=True)
    h100 = make_profile(gpus=(make_gpu(name="NVIDIA H100 80GB HBM3", cc=(9, 0)),))
    assert check_portability(preset, h100).same_device
    for profile, why in [
        (make_profile(gpus=(make_gpu(),)), "and NVIDIA A100-SXM4-80GB is 8.0"),
        (make_profile(), "need a CUDA device with FP8 tensor cores .*, not cpu"),
    ]:
        with pytest.raises(HardwareMismatchError, match=f"config.fp8_linears: .*{why}") as info:
            check_portability(preset, profile, force=True)
        assert "set config.fp8_linears: false, or search again on" in str(info.value)
    assert check_portability(hopper_preset(), make_profile(gpus=(make_gpu(),)))  # off: fine


def test_the_portability_check_without_torchao_says_how_to_install_it(no_torchao: None) -> None:
    h100 = make_profile(gpus=(make_gpu(name="NVIDIA H100 80GB HBM3", cc=(9, 0)),))
    with pytest.raises(HardwareMismatchError, match=r"pip install 'autotune-train\[fp8\]'"):
        check_portability(hopper_preset(fp8_linears=True), h100)


def test_accelerate_carries_it_and_the_others_say_what_to_do() -> None:
    on = hopper_preset(fp8_linears=True)
    data = export_preset(on, "accelerate").data
    assert data is not None
    assert data["mixed_precision"] == "fp8" and data["fp8_config"] == {"backend": "AO"}
    off = export_preset(hopper_preset(), "accelerate").data
    assert off is not None and off["mixed_precision"] == "bf16" and "fp8_config" not in off
    for format in ("hf", "lightning", "deepspeed"):
        unmapped = "\n".join(export_preset(on, format).unmapped)
        assert "config.fp8_linears=true: convert the model before compiling it" in unmapped
    assert "fp8_linears" not in "\n".join(export_preset(hopper_preset(), "hf").unmapped)


def test_trial_tables_show_it() -> None:
    assert summarize_config(fp8(compile="default").to_dict()).endswith("compile=default fp8")
