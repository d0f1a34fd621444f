"""One build (``autotune.engine.build``): the burst, the trainer and ``PresetLoop`` build a
config's model, optimizer and step alike, in one order (the backend flags before the
compile, so that what compile traces runs under the flags the steps run under)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_lm import make_spec
from torch import nn

from autotune.burst import trial as trial_module
from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.contract.spec import ModelSpec
from autotune.core.errors import ModelLoadError
from autotune.data import TrainData, prepare_lm_data
from autotune.engine import step as step_module
from autotune.engine.build import build_training
from autotune.train.loop import PresetLoop
from autotune.train.trainer import Trainer

CPU = torch.device("cpu")
SEQ = 16

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> TrainData:
    cache = tmp_path_factory.mktemp("cache")
    return prepare_lm_data(None, seq_len=SEQ, vocab_size=260, cache_dir=cache)


def _record_build(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``apply_backend_flags`` and ``compile_model``, wherever a module of autotune holds
    them, replaced by ones that note their call (then do what the real ones do)."""
    events: list[str] = []
    real_flags, real_compile = step_module.apply_backend_flags, step_module.compile_model

    def flags(config: TrainConfig, device: torch.device) -> None:
        events.append("backend flags")
        real_flags(config, device)

    def compile_model(model: nn.Module, config: TrainConfig) -> nn.Module:
        events.append("compile")
        return real_compile(model, config)

    fakes: dict[str, tuple[Any, Any]] = {
        "apply_backend_flags": (real_flags, flags),
        "compile_model": (real_compile, compile_model),
    }
    for name, module in list(sys.modules.items()):
        if not name.startswith("autotune"):
            continue
        for attribute, (real, fake) in fakes.items():
            if getattr(module, attribute, None) is real:
                monkeypatch.setattr(module, attribute, fake)
    return events


def _summary(events: list[str], optimizer: torch.optim.Optimizer, model: nn.Module) -> Any:
    return (
        list(events),
        type(optimizer),
        optimizer.defaults.get("fused"),
        isinstance(model, torch._dynamo.eval_frame.OptimizedModule),
    )


def test_the_burst_the_trainer_and_preset_loop_build_alike(
    data: TrainData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same optimizer (class, fused), the same compiled module, and the backend flags
    set before the compile, whoever builds (the burst set them after it once)."""
    spec = make_spec()
    config = TrainConfig(
        micro_batch=2, grad_accum=1, seq_len=SEQ, compile="default", fused_optimizer=True
    )
    events = _record_build(monkeypatch)

    built = trial_module._build(spec, config, CPU)
    burst = _summary(events, built.optimizer, built.model)

    events.clear()
    training = TrainingDefaults(max_steps=1, warmup_steps=0)
    trainer = Trainer(spec, config, training, data, tmp_path / "run", echo=lambda _: None)
    trainer._build(None)
    trained = _summary(events, trainer.optimizer, trainer.model)

    events.clear()
    loop = PresetLoop(config)
    model = loop.prepare(spec.build(activation_checkpointing=False, knobs={}))
    optimizer = loop.optimizer(model)
    loop.stepper(model, optimizer, loss_fn=spec.loss_fn)
    looped = _summary(events, optimizer, model)

    expected = (["backend flags", "compile"], torch.optim.AdamW, True, True)
    assert burst == expected
    assert trained == expected
    assert looped == expected


def test_the_trainer_names_a_build_fn_that_fails(data: TrainData, tmp_path: Path) -> None:
    """The model's own build runs under ``user_code`` inside the engine's build."""

    def broken(**_: Any) -> nn.Module:
        raise RuntimeError("no such layer")

    spec: ModelSpec = dataclasses.replace(make_spec(), build_fn=broken)
    config = TrainConfig(micro_batch=2, seq_len=SEQ)
    training = TrainingDefaults(max_steps=1, warmup_steps=0)
    trainer = Trainer(spec, config, training, data, tmp_path / "run", echo=lambda _: None)
    with pytest.raises(ModelLoadError, match=r"its build_fn failed: .*no such layer"):
        trainer._build(None)


def test_a_module_given_without_its_loss_is_refused() -> None:
    with pytest.raises(ValueError, match="needs its loss_fn"):
        build_training(nn.Linear(4, 1), TrainConfig(micro_batch=2, seq_len=SEQ), CPU)
