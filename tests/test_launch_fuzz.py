"""`--set` overrides and the run's numbers, generated: whatever a user types, preparing a
run either succeeds with a config that passes its own checks or raises a UsageError (exit
2, one paragraph), never another exception (the fault suite)."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from fake_lm import FAKE_LM
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from autotune.config.train_config import TrainConfig, TrainingDefaults
from autotune.core.errors import UsageError
from autotune.machine.hardware import probe
from autotune.machine.profile import HardwareProfile
from autotune.train.launch import prepare_training

MODEL = f"{FAKE_LM}:spec"
FIELDS = [f"config.{name}" for name in TrainConfig.__dataclass_fields__] + [
    f"training.{name}" for name in TrainingDefaults.__dataclass_fields__
]
KEYS = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(["config.knobs.width", "config.knobs", "training", "config.", ".x", ""]),
    st.text(max_size=20),
)
AWKWARD = [
    "0", "-1", "1", "2", "1e9", "1e-9", "nan", "inf", "-inf", "true", "null", "~", "[1]",
    "{a: 1}", "bf16", "fp8", "max-autotune", "''", "!!python/object:os.system x", "&a *a",
    "100000", "1024", "3.5", "0x10", "'4'",
    # the numeric edges: what numpy, torch and C integers take ends at one of these
    "2147483647", "2147483648", "4294967295", "4294967296", "9223372036854775807",
    "9223372036854775808", "18446744073709551616", "1e23", "99999999999999999999999",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(AWKWARD),
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.text(max_size=30),
)
OVERRIDE = st.one_of(
    st.tuples(KEYS, VALUES).map(lambda kv: f"{kv[0]}={kv[1]}"),
    st.text(max_size=40),  # no '=' at all, or several
)


@functools.cache
def _profile() -> HardwareProfile:
    return probe()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.lists(OVERRIDE, max_size=4))
@example(overrides=["config.knobs=0", "config.knobs.width=0"])  # was a TypeError traceback
@example(overrides=["config.micro_batch=2147483648"])  # was taken: no bound on sizes
@example(overrides=["config.grad_accum=9223372036854775807"])  # was taken
@example(overrides=["config.num_workers=1", "config.prefetch_factor=4294967296"])  # was taken
@example(overrides=["training.seed=4294967296"])
def test_any_set_override_is_a_valid_run_or_a_usage_error(overrides: list[str]) -> None:
    a_valid_run_or_a_usage_error(overrides)


@pytest.mark.slow  # the same over 400 examples: 5-12 s on the 2-core CPU
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(overrides=st.lists(OVERRIDE, max_size=4))
def test_any_set_override_over_more_examples(overrides: list[str]) -> None:
    a_valid_run_or_a_usage_error(overrides)


def a_valid_run_or_a_usage_error(overrides: list[str]) -> None:
    try:
        run = prepare_training(
            model=MODEL, device="cpu", overrides=overrides, profile=_profile(), max_steps=1
        )
    except UsageError as exc:
        message = str(exc)
        assert message.strip() and "Traceback" not in message
        return
    assert isinstance(run.config, TrainConfig) and 1 <= run.config.micro_batch < 2**31
    assert 0 <= run.config.num_workers <= 1024
    assert run.config.seq_len < 2**31 and run.config.grad_accum < 2**31
    assert 0 <= run.training.seed < 2**32  # numpy's seeding takes no more
    assert all(
        abs(value) < 2**63
        for value in vars(run.training).values()
        if isinstance(value, int) and not isinstance(value, bool)
    )


NUMBERS = st.one_of(
    st.none(),
    st.integers(min_value=-(10**9), max_value=10**9),
    st.sampled_from([0, -1, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63)]),
    st.integers(min_value=-(2**70), max_value=2**70),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    max_steps=NUMBERS,
    eval_interval=NUMBERS,
    lr=st.one_of(st.none(), st.floats(), st.sampled_from([1e23, float("nan"), float("inf")])),
)
def test_any_run_number_is_a_valid_run_or_a_usage_error(
    max_steps: int | None, eval_interval: int | None, lr: float | None
) -> None:
    kwargs: dict[str, Any] = dict(max_steps=max_steps, eval_interval=eval_interval, lr=lr)
    try:
        run = prepare_training(model=MODEL, device="cpu", profile=_profile(), **kwargs)
    except UsageError as exc:
        assert str(exc).strip()
        return
    assert 0 < run.training.lr < float("inf")
    assert max_steps is None or 1 <= max_steps < 2**63
    assert eval_interval is None or 1 <= eval_interval < 2**63
