"""The search's arguments, generated: whatever a user passes (budgets, lengths, knobs,
durations, names, counts), `search()` finishes with a result or raises an AutotuneError (a
one-paragraph message: exit 2 for bad input, 1 when, say, nothing fits a tiny budget),
never another exception (the fault suite). Bursts are faked, so
each example is a real search of a few trials in milliseconds."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autotune.core.errors import AutotuneError
from autotune.study import search, search_options
from autotune.testing.burst import FakeBurst, cpu_profile, toy_spec

TEXTS = st.one_of(
    st.sampled_from(
        ["1GB", "0", "-1GB", "8 GiB", "1e3MB", "0.5", "1.5", "abc", "", " ", "nan", "inf",
         "10m", "1h", "soon", "64-256", "64,128", "256-64", "0-0", "x-y", "..", "a/b", "ok"]
    ),
    st.text(max_size=12),
)  # fmt: skip
KNOBS = st.lists(
    st.one_of(
        st.sampled_from(
            ["precision=fp32", "precision=bf16", "precision=fp64", "compile=off", "num_workers=0",
             "num_workers=99", "micro_batch=4", "micro_batch=0", "nope=1", "=", "precision="]
        ),
        st.text(max_size=15),
    ),
    max_size=3,
)  # fmt: skip
COUNTS = st.one_of(st.none(), st.integers(min_value=-3, max_value=4))


ARGUMENTS = dict(
    budget=st.one_of(TEXTS, st.integers(min_value=-(2**40), max_value=2**40)),
    seq_len=st.one_of(st.none(), TEXTS, st.integers(min_value=-5, max_value=1024)),
    timeout=st.one_of(st.none(), TEXTS),
    study=st.one_of(st.none(), TEXTS),
    knobs=KNOBS,
    trials=COUNTS,
    global_batch=COUNTS,
)
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=40, **SETTINGS)  # type: ignore[arg-type]
@given(**ARGUMENTS)
def test_any_search_arguments_give_a_result_or_a_clear_error(**arguments: Any) -> None:
    a_result_or_a_clear_error(**arguments)


@pytest.mark.slow  # the same over 120 examples: 9-25 s on the 2-core CPU (no trial limit: 30)
@settings(max_examples=120, **SETTINGS)  # type: ignore[arg-type]
@given(**ARGUMENTS)
def test_any_search_arguments_over_more_examples(**arguments: Any) -> None:
    a_result_or_a_clear_error(**arguments)


def a_result_or_a_clear_error(
    budget: Any, seq_len: Any, timeout: Any, study: Any, knobs: list[str], **counts: Any
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = search(
                toy_spec(),
                budget=budget,
                **search_options(
                    seq_len=seq_len,
                    timeout=timeout,
                    study=study,
                    knobs=knobs,
                    hardware=cpu_profile(),
                    burst_fn=FakeBurst(),
                    runs_dir=Path(tmp) / "runs",
                    output=Path(tmp) / "best.yaml",
                    steps=2,
                    warmup=0,
                    **counts,
                ),
            )
        except AutotuneError as exc:
            assert str(exc).strip() and "Traceback" not in str(exc)
            return
        assert result.study_name
