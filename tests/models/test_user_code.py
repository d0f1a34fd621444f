"""``user_code``: the one rule for a user model's functions failing outside a trial, and
``make_batch``'s check that a batch is a dict of tensors."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from pathlib import Path
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


def test_two_threads_may_load_one_factory_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard against a factory that loads itself again is per thread: a second
    thread loading the same reference meanwhile is no re-entry."""
    import threading

    import fake_lm

    from autotune.models.registry import load_model

    # each load imports the file afresh: the barrier lives in a module imported once
    monkeypatch.setattr(fake_lm, "both", threading.Barrier(2, timeout=30), raising=False)
    monkeypatch.setattr(fake_lm, "calls", [], raising=False)
    (tmp_path / "slow_factory.py").write_text(
        "import time, fake_lm\n"
        "def spec():\n"
        "    fake_lm.calls.append(1)\n"
        "    second = len(fake_lm.calls) == 2\n"
        "    fake_lm.both.wait()  # the two threads are inside the call together\n"
        "    if second:  # the first to start is the first to finish\n"
        "        time.sleep(0.3)\n"
        "    return fake_lm.spec\n"
    )
    real_exit = os._exit
    ref = f"{tmp_path / 'slow_factory.py'}:spec"
    results: list[object] = []

    def load() -> None:
        try:
            results.append(load_model(ref).name)
        except Exception as exc:
            results.append(exc)

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == ["fake-lm", "fake-lm"], results
    assert os._exit is real_exit  # given back: each load gave back what it found, before
