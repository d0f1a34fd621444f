"""prepare_training: the run `autotune train` starts, as a Python function."""

from __future__ import annotations

import pytest
from fake_lm import FAKE_LM

from autotune.core.errors import ConfigError, ModelLoadError, UsageError
from autotune.machine.hardware import probe
from autotune.train.launch import prepare_training

MODEL = f"{FAKE_LM}:spec"


def test_a_bare_model_with_changes_and_overrides() -> None:
    run = prepare_training(
        model=MODEL,
        device="cpu",
        max_steps=7,
        lr=0.01,
        overrides=["config.micro_batch=2", "training.warmup_steps=3"],
        profile=probe(),
    )
    assert run.spec.name == "fake-lm" and run.name == "fake-lm" and run.report is None
    assert (run.config.micro_batch, run.config.seq_len, run.config.precision) == (2, 16, "fp32")
    assert (run.training.max_steps, run.training.epochs, run.training.lr) == (7, None, 0.01)
    assert run.training.warmup_steps == 3
    assert run.device == "cpu" and run.caps.kind == "cpu"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, r"give preset \(a tuned config .*\) or model \(an untuned fp32 run\)"),
        ({"model": MODEL, "max_steps": 0}, r"^max_steps: expected a positive integer, got 0"),
        ({"model": MODEL, "eval_interval": -1}, r"^eval_interval: expected a positive integer"),
        ({"model": MODEL, "lr": 0.0}, r"^lr: expected a finite number > 0, got 0.0"),
        ({"model": MODEL, "lr": float("inf")}, r"^lr: expected a finite number > 0, got inf"),
        ({"model": MODEL, "lr": float("nan")}, r"^lr: expected a finite number > 0, got nan"),
    ],
)
def test_errors_name_the_parameter(kwargs: dict[str, object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        prepare_training(**kwargs)  # type: ignore[arg-type]


def test_option_names_put_the_callers_words_in_errors() -> None:
    with pytest.raises(UsageError, match=r"^--max-steps: expected a positive integer"):
        prepare_training(model=MODEL, max_steps=0, option_names={"max_steps": "--max-steps"})


def test_the_config_is_checked_on_the_device() -> None:
    with pytest.raises(ConfigError, match="fp16 needs a CUDA device"):
        prepare_training(model=MODEL, device="cpu", overrides=["config.precision=fp16"])


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ({"model": "no_such_file.py:spec"}, ModelLoadError),
        ({"preset": "no_such_preset.yaml"}, UsageError),
    ],
)
def test_a_model_or_preset_that_does_not_load_is_said_before_the_machine_is_probed(
    monkeypatch: pytest.MonkeyPatch, source: dict[str, str], error: type[Exception]
) -> None:
    """The probe takes seconds (torch's compiler is imported to answer for torch.compile):
    a mistake in what the user named comes first."""
    import autotune.machine.hardware

    def probed() -> None:
        raise AssertionError("probed before the model or preset loaded")

    monkeypatch.setattr(autotune.machine.hardware, "probe", probed)
    with pytest.raises(error):
        prepare_training(**source)  # type: ignore[arg-type]
