"""The burst request: a frozen dataclass through the file the trial reads, and a clear
error for a file whose fields are not the request's (no process, no torch step)."""

from __future__ import annotations

import dataclasses
import os
import pickle
from pathlib import Path
from typing import Any

import fake_models
import pytest
from fake_models import FAKES

from autotune.burst.request import (
    BurstRequest,
    BurstRequestError,
    SpecRef,
    read_request,
    write_request,
)
from autotune.config.train_config import TrainConfig
from autotune.models.registry import load_model


def _request(**changes: Any) -> BurstRequest:
    spec = load_model(f"{FAKES}:oom_spec").with_args(width=4)
    request = BurstRequest(
        spec=SpecRef.of(spec), config=TrainConfig(micro_batch=2, seq_len=16), steps=3,
        warmup=1, device="cpu", seed=7, budget_bytes=10**9, verify=True, threads=2,
        workdir="/tmp/trial", profile=True, profile_steps=2, trace_path="/tmp/t.json",
        stable_within=0.1, min_warmup_s=0.5, min_timed_s=1.5,
    )  # fmt: skip
    return dataclasses.replace(request, **changes)


def _written(path: Path, request: BurstRequest) -> dict[str, Any]:
    """What ``write_request`` put in the file: the request's fields by name."""
    with open(path, "wb") as f:
        write_request(f, request)
    with open(path, "rb") as f:
        fields: dict[str, Any] = pickle.load(f)
    return fields


def test_a_request_round_trips_through_its_file_by_path_and_by_descriptor(
    tmp_path: Path,
) -> None:
    request = _request()
    path = tmp_path / "request.pkl"
    _written(path, request)
    assert read_request(str(path)) == request
    fd = os.open(path, os.O_RDONLY)  # read_request closes it
    assert read_request(f"fd:{fd}") == request
    spec = read_request(str(path)).spec.load()
    assert spec.source == f"{FAKES}:oom_spec" and dict(spec.args)["width"] == 4


def test_a_spec_without_a_source_travels_pickled(tmp_path: Path) -> None:
    spec = dataclasses.replace(fake_models.fake_spec, source="")  # importable: picklable
    path = tmp_path / "request.pkl"
    _written(path, _request(spec=SpecRef.of(spec)))
    ref = read_request(str(path)).spec
    assert ref.source is None and ref.load().name == spec.name


def test_unknown_and_missing_fields_are_named(tmp_path: Path) -> None:
    path = tmp_path / "request.pkl"
    fields = _written(path, _request())
    del fields["seed"]
    fields["colour"] = "blue"
    path.write_bytes(pickle.dumps(fields))
    with pytest.raises(BurstRequestError) as caught:
        read_request(str(path))
    message = str(caught.value)
    assert "unknown fields ['colour']" in message and "missing fields ['seed']" in message
    assert str(path) in message and "BurstRequest" in message

    fields = _written(path, _request())
    del fields["spec"]["args"]
    path.write_bytes(pickle.dumps(fields))
    with pytest.raises(BurstRequestError, match=r"its spec.*missing fields \['args'\]"):
        read_request(str(path))

    path.write_bytes(pickle.dumps(["not", "a", "request"]))
    with pytest.raises(BurstRequestError, match="is a list, not a request's fields"):
        read_request(str(path))


def test_a_bad_value_in_the_file_is_a_request_error(tmp_path: Path) -> None:
    path = tmp_path / "request.pkl"
    fields = _written(path, _request())
    path.write_bytes(pickle.dumps({**fields, "steps": 0}))
    with pytest.raises(BurstRequestError, match="steps=0"):
        read_request(str(path))


def test_every_bad_value_is_named_at_once() -> None:
    with pytest.raises(ValueError) as caught:
        _request(steps=0, threads=0, stable_within=1.0, min_timed_s=-1.0)
    message = str(caught.value)
    for name in ("steps=0", "threads=0", "stable_within=1.0", "min_timed_s=-1.0"):
        assert name in message
    with pytest.raises(ValueError, match="exactly one"):
        SpecRef()


def test_the_request_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        _request().steps = 5  # type: ignore[misc]
