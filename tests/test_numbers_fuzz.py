"""Every number autotune takes, at its edges (the fault suite): 0, -1, 2**31, 2**32, 2**63,
2**64, 1e23, NaN and infinity (where a float is read) and generated integers, through
every entry point: ``search()``'s and ``tune()``'s options, ``autotune search``, ``bench``
and ``presets check``, and a preset's fields (``train``'s numbers and ``--set`` are
tests/test_launch_fuzz.py's). A number within its documented bound (docs/reliability.md,
``Numbers``) is taken; one beyond it is refused with exit 2 before any process starts;
none reaches numpy, torch or a C integer. The bounds are written out here, not read
from autotune, so that a bound that moves fails a test. A refusal starts no search, so
each case takes milliseconds."""

from __future__ import annotations

import copy
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_models import FAKES
from fake_presets import make_preset
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import nn
from typer.testing import CliRunner

import autotune
import autotune.burst.supervisor
import autotune.machine.hardware
from autotune.cli.main import app
from autotune.core.errors import PresetError, UsageError
from autotune.preset import preset_from_dict, preset_to_dict
from autotune.study import search_options
from autotune.testing.burst import FakeBurst, cpu_profile, toy_spec

NAN, INF = float("nan"), float("inf")
EDGES: list[Any] = [
    0, -1, 1, 2, 1024, 1025, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64,
    -(2**63), 10**23, 1e23, 3.0, NAN, INF, -INF, True, "7", None,
]  # fmt: skip
SEED = (0, 2**32 - 1)  # numpy's np.random.seed takes no more; torch's takes 2**64 - 1
COUNT = (1, 2**63 - 1)  # a 64-bit count (SQLite, torch's int64)
SIZE = (1, 2**31 - 1)  # a batch or a length: two of them multiply within a 64-bit count
PROCESSES = (1, 1024)
YEAR_S = 365 * 86_400  # the longest time limit

# search()'s (and tune()'s) integer options: their bound, and whether None means "unset"
SEARCH_NUMBERS: dict[str, tuple[tuple[int, int], bool]] = {
    "seed": (SEED, False),
    "global_batch": (SIZE, True),
    "train_steps": (COUNT, True),
    "nproc_per_node": (PROCESSES, False),
    "trials": (COUNT, True),
    "steps": ((2, COUNT[1]), False),  # the pruner needs two timed steps
    "warmup": ((0, COUNT[1]), True),
    "finalists": (COUNT, False),
    "race_rounds": (COUNT, False),
    "race_steps": (COUNT, True),
    "n_startup_trials": ((0, COUNT[1]), True),
}
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def within(value: Any, bound: tuple[int, int]) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and bound[0] <= value <= bound[1]


def seconds_within(value: Any) -> bool:
    """A duration the docs allow: a number (or text such as 600, 10m, 1.5h) of seconds in
    (0, a year]."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, str):
        units = {"s": 1, "m": 60, "h": 3600}
        number, unit = (value[:-1], value[-1]) if value[-1:] in units else (value, "s")
        if not number.replace(".", "", 1).isdigit():
            return False
        value = float(number) * units[unit]
    return isinstance(value, int | float) and 0 < value <= YEAR_S


def options_refusal(**options: Any) -> UsageError | None:
    """The refusal of ``search()``'s option records made from ``options`` (None: taken).
    The records are what ``search()``, ``tune()`` and ``autotune search`` make first."""
    try:
        search_options(
            hardware=cpu_profile(), burst_fn=FakeBurst(), output=None,
            runs_dir=tempfile.gettempdir(), **options,
        )  # fmt: skip
    except UsageError as exc:
        assert exc.exit_code == 2 and "Traceback" not in str(exc)
        return exc
    return None


# -- search() and tune(): the option records ------------------------------------------------


@pytest.mark.parametrize("name", SEARCH_NUMBERS)
@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_a_search_option_number_is_taken_within_its_bound_and_refused_beyond(
    name: str, value: Any
) -> None:
    bound, optional = SEARCH_NUMBERS[name]
    refusal = options_refusal(**{name: value})
    if within(value, bound) or (value is None and optional):
        assert refusal is None, refusal
    else:
        assert refusal is not None, f"{name}={value!r} was taken"
        assert name in str(refusal), refusal
        if isinstance(value, int) and value > bound[1]:
            assert f"at most {bound[1]}" in str(refusal), refusal


@FAST
@given(
    name=st.sampled_from(sorted(SEARCH_NUMBERS)),
    value=st.integers(min_value=-(2**70), max_value=2**70),
)
def test_any_integer_search_option_is_taken_or_refused_by_its_bound(name: str, value: int) -> None:
    refusal = options_refusal(**{name: value})
    assert (refusal is None) == within(value, SEARCH_NUMBERS[name][0]), (name, value, refusal)


DURATIONS: list[Any] = [
    *EDGES, 10**400, 1e300, YEAR_S, YEAR_S + 1, "8760h", "8761h", "525600m", "99999999h",
    "inf", "nan", "1e23", "0", "0.5", "10m",
]  # fmt: skip


@pytest.mark.parametrize("name", ["timeout", "burst_timeout"])
@pytest.mark.parametrize("value", DURATIONS, ids=repr)
def test_a_time_limit_is_taken_within_a_year_and_refused_beyond(name: str, value: Any) -> None:
    if value is None and name == "burst_timeout":
        return  # None is "no limit" only for the search's own timeout
    refusal = options_refusal(**{name: value})
    if seconds_within(value) or (value is None and name == "timeout"):
        assert refusal is None, refusal
    else:
        assert refusal is not None and name in str(refusal), f"{name}={value!r} was taken"


SEQ_LENS: list[Any] = [
    *EDGES, "2147483647", "2147483648", "1-2147483647", "1-2147483648", "64-256",
    "1-99999999999999999999999", [64, 2**31], [64, NAN], [64, 1.5], [64, 128],
]  # fmt: skip


@pytest.mark.parametrize("value", SEQ_LENS, ids=repr)
def test_a_sequence_length_is_taken_within_its_bound_and_refused_beyond(value: Any) -> None:
    refusal = options_refusal(seq_len=value)
    if isinstance(value, str) and "-" in value:
        ok = within(int(value.partition("-")[2]), SIZE)  # each power of two up to its end
    elif isinstance(value, str):
        ok = within(int(value), SIZE)
    elif isinstance(value, list):
        ok = all(within(v, SIZE) for v in value)
    else:
        ok = value is None or within(value, SIZE)
    assert (refusal is None) == ok, (value, refusal)


@pytest.mark.parametrize(
    "budget", [0, -1, 2**63, 2**64, 1e23, NAN, INF, -INF, "1e23GB", "99999999999TB", True]
)
def test_search_refuses_a_budget_no_device_has_before_any_burst(budget: Any) -> None:
    def burst(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a burst started with budget={budget!r}")

    with tempfile.TemporaryDirectory() as tmp, pytest.raises(UsageError) as info:
        autotune.search(
            toy_spec(),
            budget=budget,
            **search_options(hardware=cpu_profile(), burst_fn=burst, runs_dir=tmp, output=None),
        )
    assert info.value.exit_code == 2 and "budget" in str(info.value), info.value


def _build() -> nn.Module:
    return nn.Linear(4, 1)


def _loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    return nn.functional.mse_loss(model(batch["x"]), batch["y"])


BATCH = {"x": torch.zeros(8, 4), "y": torch.zeros(8, 1)}


@pytest.mark.parametrize(
    ("name", "value"),
    [
        *[(name, v) for name in ("global_batch", "size") for v in (0, -1, 2**31, 2**63, 1e23)],
        ("seed", 2**32), ("seed", -1), ("trials", 2**63), ("steps", 2**64), ("timeout", 1e23),
        ("burst_timeout", NAN), ("nproc_per_node", 2**31), ("seq_len", 2**32),
    ],
)  # fmt: skip
def test_tune_refuses_a_number_beyond_its_bound_before_any_burst(name: str, value: Any) -> None:
    def burst(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a burst started with {name}={value!r}")

    with tempfile.TemporaryDirectory() as tmp, pytest.raises(UsageError) as info:
        autotune.tune(
            build=_build, loss=_loss, batch=BATCH, budget="1GB", hardware=cpu_profile(),
            burst_fn=burst, runs_dir=tmp, output=None, **{name: value},
        )  # fmt: skip
    assert info.value.exit_code == 2 and name in str(info.value), info.value


@pytest.mark.parametrize("value", [0, -1, 2**31, 2**63, 2**64])
def test_a_model_spec_with_a_global_batch_beyond_the_bound_is_refused(value: int) -> None:
    """A user's spec: its global batch was the search's (grad_accum then overflowed)."""
    with pytest.raises(ValueError, match="global_batch must be"):
        toy_spec(global_batch=value)


@pytest.mark.parametrize("value", [1, 2**31 - 1])
def test_tune_takes_sizes_up_to_the_bound(value: int) -> None:
    from autotune.study.session.tune import model_spec

    spec = model_spec(build=_build, loss=_loss, batch=BATCH, global_batch=value, size=value)
    assert spec.global_batch == value == spec.seq_len


# -- the command line: the refusals the round of testing found, and bench / presets check -----


@pytest.fixture
def no_burst(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A burst (a trial process) fails the test; the machine is a hand-made CPU; the
    working folder is a new one."""
    monkeypatch.chdir(tmp_path)

    def started(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a burst started")

    monkeypatch.setattr(autotune.burst.supervisor, "run_burst", started)
    monkeypatch.setattr(autotune.machine.hardware, "probe", lambda: cpu_profile())


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # was a 69-line traceback from numpy, under the sampler
        (["search", "--seed", "4294967296"], "--seed must be an integer of at most 4294967295"),
        # was taken; the naive trial failed with an OverflowError, exit 1
        (["search", "--global-batch", str(2**63)], "--global-batch must be an integer of at most"),
        (["search", "--trials", str(2**64)], "--trials must be an integer of at most"),
        (["search", "--steps", str(2**63)], "--steps must be an integer of at most"),
        (["search", "--nproc-per-node", "1025"], "--nproc-per-node must be an integer of at most"),
        (["search", "--timeout", "99999999h"], "--timeout must be a duration of at most 365"),
        (["search", "--burst-timeout", "9000h"], "--burst-timeout must be a duration of at most"),
        (["search", "--seq-len", "1-99999999999999999999"], "--seq-len '1-9999"),
        (["search", "--knob", f"micro_batch={2**31}"], "micro_batch"),
        # was exit 1, blaming the model spec (torch's seed overflowed in the trial)
        (["bench", "--seed", "99999999999999999999999"], "--seed must be an integer of at most"),
        (["bench", "--timeout", "nan"], "--timeout must be a positive duration"),
        (["bench", "--timeout", "inf"], "--timeout must be a duration of at most"),
        (["bench", "--timeout", "1e23"], "--timeout must be a duration of at most"),
        (["bench", "--steps", str(2**63)], "--steps must be an integer of at most"),
        (["bench", "--warmup", "-1"], "--warmup must be an integer >= 0"),
        (["bench", "--micro-batch", str(2**32)], "config.micro_batch: expected an integer from 1"),
        (["bench", "--seq-len", str(2**63)], "config.seq_len: expected an integer from 1"),
        (["bench", "--grad-accum", str(2**31)], "config.grad_accum: expected an integer from 1"),
        (["bench", "--workers", "1025"], "config.num_workers: expected an integer from 0 to 1024"),
        (["presets", "check", "any.yaml", "--timeout", "nan"], "--timeout must be a positive"),
        (["presets", "check", "any.yaml", "--timeout", "inf"], "--timeout must be a duration"),
        (["presets", "check", "any.yaml", "--steps", str(2**64)], "--steps must be an integer"),
        (["presets", "check", "any.yaml", "--warmup", str(2**63)], "--warmup must be an integer"),
    ],
)
def test_a_flag_beyond_its_bound_exits_2_before_any_process(
    no_burst: None, args: list[str], expected: str
) -> None:
    command = {
        "search": ["--model", f"{FAKES}:fake_spec", "--budget", "1GB", "--output", "x.yaml"],
        "bench": ["--model", f"{FAKES}:fake_spec", "--micro-batch", "2", "--seq-len", "16"],
        "presets": [],
    }[args[0]]
    result = CliRunner().invoke(app, [*args[:1], *command, *args[1:]])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr, result.stderr
    assert "Traceback" not in result.output


# -- a preset's numbers ------------------------------------------------------------------------

VALID = preset_to_dict(make_preset())
PRESET_NUMBERS: dict[tuple[str, str], tuple[int, int]] = {
    ("config", "micro_batch"): SIZE,
    ("config", "grad_accum"): SIZE,
    ("config", "seq_len"): SIZE,
    ("config", "prefetch_factor"): SIZE,
    ("config", "num_workers"): (0, 1024),
    ("task", "seq_len"): SIZE,
    ("task", "global_batch"): SIZE,
    ("training", "seed"): SEED,
    ("training", "max_steps"): COUNT,
    ("training", "eval_interval"): COUNT,
    ("training", "warmup_steps"): (0, COUNT[1]),
}


@pytest.mark.parametrize("field", PRESET_NUMBERS, ids=".".join)
@pytest.mark.parametrize("value", [v for v in EDGES if v is not None], ids=repr)
def test_a_preset_number_beyond_its_bound_is_refused_naming_the_field(
    field: tuple[str, str], value: Any
) -> None:
    data = copy.deepcopy(VALID)
    data[field[0]][field[1]] = value
    if field == ("config", "prefetch_factor"):
        data["config"]["num_workers"] = 1
    path = ".".join(field)
    try:
        preset = preset_from_dict(data)
    except PresetError as exc:
        assert exc.exit_code == 2
        if not within(value, PRESET_NUMBERS[field]):
            assert path in str(exc), exc
        return
    got = getattr(getattr(preset, field[0]), field[1])
    assert within(got, PRESET_NUMBERS[field]), f"{path}={value!r} was taken as {got!r}"
    assert not (isinstance(value, float) and not math.isfinite(value))
