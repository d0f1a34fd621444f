"""``autotune.tune()``'s arguments, generated (the fault suite, like ``test_api_fuzz.py``
for ``search()``): knobs, budget, limits, sizes and data of every wrong type, strings
where lists go, huge numbers. Each call ends in a ``TuneResult`` or an ``AutotuneError``
with a one-paragraph message, never another exception. Bursts are faked, so each example
is a real search of a few trials in milliseconds."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from torch import nn

import autotune
from autotune.core.errors import AutotuneError
from autotune.testing.burst import FakeBurst, cpu_profile


def build() -> nn.Module:
    return nn.Linear(4, 1)


def mse(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


BATCH = {"x": torch.zeros(8, 4), "y": torch.zeros(8, 1)}
HUGE = st.sampled_from([2**63, -(2**63), 10**30, float("inf"), float("nan"), 1e308])
ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=64),
    HUGE,
    st.sampled_from(["1GB", "0", "-1", "abc", "", "8", "1e3MB", "0.5", "10m", "64-256", "[]"]),
    st.text(max_size=8),
    st.lists(st.integers(min_value=-2, max_value=8), max_size=3),
    st.just({"a": 1}),
)
KNOBS = st.one_of(
    st.lists(
        st.sampled_from(
            ["precision=fp32", "compile=off", "micro_batch=4", "micro_batch=0", "nope=1", "=",
             "num_workers=99", "precision="]
        ),
        max_size=3,
    ),
    st.sampled_from(["precision=fp32", "compile=off", ""]),  # a string where a list goes
    ODD,
)  # fmt: skip
# An option name tune() does not know reaches search_options, which must refuse it.
EXTRA = st.one_of(st.just({}), st.sampled_from([{"trails": 3}, {"model": "mu"}, {"seed": -1}]))


# No shrinking: a failing example is printed as found (shrinking searches took minutes).
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.generate],
)
@given(
    budget=st.one_of(st.just("1GB"), ODD),
    knobs=KNOBS,
    trials=st.one_of(st.just(2), ODD),
    timeout=st.one_of(st.none(), ODD),
    global_batch=st.one_of(st.just(8), ODD),
    size=st.one_of(st.just(1), ODD),
    data=st.sampled_from(["batch", "loader", "both", "neither", "list", "empty", "string"]),
    name=st.one_of(st.just("fuzzed"), ODD),
    extra=EXTRA,
)
def test_any_tune_arguments_give_a_result_or_a_clear_error(
    data: str, extra: dict[str, Any], **fuzzed: Any
) -> None:
    sources: dict[str, dict[str, Any]] = {
        "batch": {"batch": BATCH},
        "loader": {"dataloader": lambda: torch.utils.data.TensorDataset(torch.zeros(8, 4))},
        "both": {"batch": BATCH, "dataloader": lambda: None},
        "neither": {},
        "list": {"batch": [torch.zeros(8, 4)]},
        "empty": {"batch": {}},
        "string": {"batch": "x,y"},
    }
    with tempfile.TemporaryDirectory() as tmp:
        try:
            result = autotune.tune(
                build=build,
                loss=mse,
                **sources[data],
                **fuzzed,
                steps=2,
                warmup=0,
                hardware=cpu_profile(),
                burst_fn=FakeBurst(),
                runs_dir=Path(tmp) / "runs",
                output=None,
                **extra,
            )
        except AutotuneError as exc:
            assert str(exc).strip() and "Traceback" not in str(exc)
            return
        assert result.search.study_name and result.preset.config.micro_batch >= 1
