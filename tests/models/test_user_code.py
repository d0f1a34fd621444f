"""``user_code``: the one rule for a user model's functions failing outside a trial, and
``make_batch``'s check that a batch is a dict of tensors."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any

import pytest
import torch

from autotune.contract.spec import user_code
from autotune.core.errors import ModelLoadError, UsageError, describe_exception
from autotune.models import get_model


def test_an_exception_names_the_model_the_function_and_the_place() -> None:
    spec = dataclasses.replace(get_model("mu"), source="my/model.py:spec")

    def broken_build() -> None:
        raise ValueError("heads must divide dim")

    with pytest.raises(ModelLoadError) as info, user_code(spec, "build_fn"):
        broken_build()
    message = str(info.value)
    assert message.startswith("model 'my/model.py:spec': its build_fn failed: ValueError: ")
    assert "[test_user_code.py:" in message and "in broken_build]" in message
    assert "must return an nn.Module" in message  # what the function must do
    assert info.value.exit_code == 2


def test_sys_exit_is_caught_too() -> None:
    expected = r"its loss_fn failed: SystemExit: it called sys"
    with pytest.raises(ModelLoadError, match=expected), user_code(get_model("mu"), "loss_fn"):
        sys.exit(0)


@pytest.mark.parametrize(
    "exc",
    [KeyboardInterrupt(), UsageError("ours"), MemoryError(), torch.cuda.OutOfMemoryError("x")],
)
def test_ctrl_c_our_errors_and_oom_pass_through(exc: BaseException) -> None:
    with pytest.raises(type(exc)), user_code(get_model("mu"), "build_fn"):
        raise exc


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([1, 2], r"returned a list, not a dict of tensors"),
        ({"input_ids": [1, 2]}, r"returned a dict whose 'input_ids' is a list, not a tensor"),
    ],
)
def test_a_batch_that_is_not_a_dict_of_tensors(batch: Any, message: str) -> None:
    def make(args: Mapping[str, Any], b: int, s: int, g: torch.Generator) -> Any:
        return batch

    spec = dataclasses.replace(get_model("mu"), make_batch_fn=make)
    with pytest.raises(TypeError, match=message):
        spec.make_batch(batch_size=2)


def test_describe_exception_is_one_line() -> None:
    try:
        raise RuntimeError("first line\nsecond line")
    except RuntimeError as exc:
        text = describe_exception(exc)
    assert text.startswith("RuntimeError: first line [test_user_code.py:")
    assert "\n" not in text and text.endswith("in test_describe_exception_is_one_line]")
