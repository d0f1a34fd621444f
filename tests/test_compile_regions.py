"""``compile_regions``: each repeated block compiled on its own instead of the whole model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.config.train_config import TrainConfig
from autotune.core.errors import ConfigError
from autotune.engine.step import compile_model, repeated_blocks
from autotune.models.registry import load_model


class _Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class _Stack(nn.Module):
    """Two lists of one class each (the bigger one is the layers), a mixed list, a head."""

    def __init__(self) -> None:
        super().__init__()
        self.small = nn.ModuleList(_Block(2) for _ in range(3))
        self.layers = nn.ModuleList(_Block(8) for _ in range(4))
        self.mixed = nn.ModuleList([nn.Linear(8, 8), nn.ReLU()])
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layers:
            x = block(x)
        return self.head(x)


def test_the_blocks_are_the_list_of_one_class_holding_the_most_parameters() -> None:
    model = _Stack()
    assert repeated_blocks(model) == list(model.layers)
    gpt = load_model("gpt-small").build()
    assert repeated_blocks(gpt) == list(gpt.layers)


def test_a_model_without_repeated_blocks_is_a_config_error_that_says_what_to_do() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
    with pytest.raises(ConfigError, match=r"no repeated blocks.*compile_regions: false"):
        repeated_blocks(model)


def test_compile_regions_needs_compile_on() -> None:
    with pytest.raises(ConfigError, match=r"config.compile_regions: only allowed with compile on"):
        TrainConfig(micro_batch=1, seq_len=8, compile_regions=True)
    TrainConfig(micro_batch=1, seq_len=8, compile="default", compile_regions=True)


def test_each_block_is_compiled_in_place_and_computes_what_the_eager_model_does() -> None:
    torch.manual_seed(0)
    model = _Stack()
    x = torch.randn(3, 8)
    expected = model(x)
    config = TrainConfig(micro_batch=1, seq_len=8, compile="default", compile_regions=True)
    compiled = compile_model(model, config)
    assert compiled is model  # the same module: its state_dict keys are unchanged
    assert all(block._compiled_call_impl is not None for block in model.layers)
    assert model._compiled_call_impl is None and model.head._compiled_call_impl is None
    torch.testing.assert_close(compiled(x), expected)


def test_without_compile_regions_the_whole_model_is_compiled() -> None:
    model = _Stack()
    config = TrainConfig(micro_batch=1, seq_len=8, compile="default")
    compiled = compile_model(model, config)
    assert compiled is not model and getattr(compiled, "_orig_mod", None) is model
    assert all(block._compiled_call_impl is None for block in model.layers)


@pytest.mark.slow
def test_a_burst_compiles_the_blocks_of_a_real_model() -> None:
    from autotune.burst.supervisor import run_burst

    spec = load_model("gpt-small")
    config = TrainConfig(
        micro_batch=2, grad_accum=1, seq_len=32, compile="default", compile_regions=True
    )
    result = run_burst(spec, config, steps=2, warmup=1, timeout_s=300)
    assert result.status == "ok", result.reason
    assert result.tokens_per_s and result.tokens_per_s > 0


def test_a_config_compiled_per_block_says_so_in_its_summary() -> None:
    from autotune.study.trials.records import summarize_config

    config = TrainConfig(micro_batch=8, grad_accum=4, seq_len=128, compile="default")
    assert summarize_config(config.to_dict()).endswith("compile=default")
    regions = config.replace(compile_regions=True).to_dict()
    assert summarize_config(regions).endswith("compile=default per-block")


def test_a_burst_of_a_model_without_blocks_says_why_in_one_line() -> None:
    from autotune.core.errors import describe_exception

    try:
        repeated_blocks(nn.Sequential(nn.Linear(2, 2)))
    except ConfigError as exc:
        text = describe_exception(exc)
    assert "\n" not in text
    assert text.startswith("ConfigError: config.compile_regions: the model has no repeated blocks")
