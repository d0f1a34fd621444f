"""What the parent sends the trial: a ``BurstRequest``, written by ``write_request`` and
read back by the trial (``read_request``). A one-process trial reads it from a file with
no name that it inherits (``fd:N``), so the parent leaves nothing on disk; torchrun's
ranks inherit no descriptors and read it by its path in the folder the parent made.

It holds the config, the step counts (and when the timed steps may end early), the
budget, the device, the seed and the spec (``SpecRef``): by its source (a built-in name,
``pkg.mod:attr`` or ``file.py:attr``) with its arguments, re-loaded in the trial, or
pickled whole where it has no source.

The file is a pickle of the request's fields by name, not of the dataclass: a pickled
dataclass would come back with whatever fields its writer had, and a trial of another
autotune would fail far from the cause. ``read_request`` builds the dataclass again and
names any field it does not know or misses (``BurstRequestError``).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec

__all__ = ["BurstRequest", "BurstRequestError", "SpecRef", "read_request", "write_request"]


class BurstRequestError(ValueError):
    """A request file the trial cannot read: not a request, or one whose fields are not
    this autotune's (the parent and the trial run different versions)."""


@dataclass(frozen=True, kw_only=True)
class SpecRef:
    """How the trial gets the model spec: its ``source`` re-loaded with ``args``, or the
    spec ``pickled`` whole where it has no source. Build it with ``SpecRef.of``."""

    source: str | None = None
    args: dict[str, Any] | None = None
    pickled: ModelSpec | None = None

    def __post_init__(self) -> None:
        if (self.source is None) == (self.pickled is None):
            raise ValueError(
                f"a spec travels by its source or pickled, exactly one of them; got "
                f"source={self.source!r}, pickled={self.pickled!r}"
            )

    @classmethod
    def of(cls, spec: ModelSpec) -> SpecRef:
        """The spec by its source where it has one (with its arguments), else pickled."""
        if spec.source:
            return cls(source=spec.source, args=dict(spec.args))
        return cls(pickled=spec)

    def load(self) -> ModelSpec:
        """The spec (in the trial): the pickled one, or its source loaded with its args."""
        if self.pickled is not None:
            return self.pickled
        from autotune.models.registry import load_model

        assert self.source is not None  # __post_init__: one of the two
        spec = load_model(self.source)
        args = dict(self.args or {})
        if dict(spec.args) != args:
            spec = spec.with_args(**args)
        return spec


@dataclass(frozen=True, kw_only=True)
class BurstRequest:
    """One burst as the trial runs it.

    ``steps`` timed optimizer steps of ``config`` after ``warmup`` untimed ones, on
    ``device``, from ``seed``. ``budget_bytes``: the memory the trial may hold (None: no
    cap). ``verify`` adds an eval step and a checkpoint save. ``threads`` caps torch's
    intra-op threads (None: one per core). ``workdir`` is the trial's folder where the
    parent made one (torchrun); None: the trial makes its own and fills it in.

    ``profile`` adds ``profile_steps`` profiled steps after the timed ones (their
    breakdown comes back in the result; ``trace_path`` receives their Chrome trace).
    ``stable_within``: the trial may end its timed steps early once they agree within
    this fraction (``autotune.burst.result.steps_stable``), or on a CPU after the first
    whose micro-batches ran evenly (``micro_batches_even``). ``min_warmup_s`` and
    ``min_timed_s``: a one-process trial runs more warm-up and timed steps than asked
    where they take less time than that (``autotune.burst.result.more_steps``).
    A bad value is a ValueError that names every bad field.
    """

    spec: SpecRef
    config: TrainConfig
    steps: int
    warmup: int
    device: str
    seed: int
    budget_bytes: int | None = None
    verify: bool = False
    threads: int | None = None
    workdir: str | None = None
    profile: bool = False
    profile_steps: int = 3
    trace_path: str | None = None
    stable_within: float | None = None
    min_warmup_s: float = 0.0
    min_timed_s: float = 0.0

    def __post_init__(self) -> None:
        problems = []
        if self.steps < 1:
            problems.append(f"steps must be at least 1, got steps={self.steps}")
        if self.warmup < 0:
            problems.append(f"warmup must be >= 0, got warmup={self.warmup}")
        if self.budget_bytes is not None and self.budget_bytes <= 0:
            problems.append(f"budget_bytes must be positive, got budget_bytes={self.budget_bytes}")
        if self.threads is not None and self.threads < 1:
            problems.append(f"threads must be at least 1, got threads={self.threads}")
        if self.profile_steps < 1:
            problems.append(f"profile_steps must be at least 1, got {self.profile_steps=}")
        if self.stable_within is not None and not 0 < self.stable_within < 1:
            problems.append(
                f"stable_within must be between 0 and 1, got stable_within={self.stable_within}"
            )
        if self.min_warmup_s < 0 or self.min_timed_s < 0:
            problems.append(
                f"minimum seconds must be >= 0, got min_warmup_s={self.min_warmup_s}, "
                f"min_timed_s={self.min_timed_s}"
            )
        if problems:
            raise ValueError("; ".join(problems))


def write_request(out: IO[bytes], request: BurstRequest) -> None:
    """Write ``request`` to ``out`` for the trial; raises (pickle's error) if something in
    it cannot travel, such as a spec without a source that holds a lambda."""
    fields = _fields_of(request)
    fields["spec"] = _fields_of(request.spec)
    pickle.dump(fields, out)
    out.flush()


def read_request(source: str) -> BurstRequest:
    """The request ``write_request`` wrote (in the trial), from ``source``: ``fd:N``, an
    inherited descriptor of a file with no name, or a path. A file that is not a request
    of this autotune is a ``BurstRequestError`` that says what is wrong with it."""
    if source.startswith("fd:"):
        with os.fdopen(int(source.removeprefix("fd:")), "rb") as f:
            f.seek(0)
            data = pickle.load(f)
    else:
        with open(source, "rb") as f:
            data = pickle.load(f)
    where = f"the burst request in {source}"
    if not isinstance(data, dict):
        raise BurstRequestError(f"{where} is a {type(data).__name__}, not a request's fields")
    _check_fields(BurstRequest, data, where)
    if not isinstance(data["spec"], dict):
        raise BurstRequestError(f"{where} holds a {type(data['spec']).__name__} as its spec")
    _check_fields(SpecRef, data["spec"], f"{where} (its spec)")
    try:
        return BurstRequest(**{**data, "spec": SpecRef(**data["spec"])})
    except ValueError as exc:
        raise BurstRequestError(f"{where} is not valid: {exc}") from exc


def _fields_of(record: BurstRequest | SpecRef) -> dict[str, Any]:
    """The record's fields by name, their values as they are (``dataclasses.asdict``
    would turn the config, a dataclass, into a dict too)."""
    return {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}


def _check_fields(cls: type[BurstRequest | SpecRef], data: Mapping[str, Any], where: str) -> None:
    """A ``BurstRequestError`` naming each field of ``data`` that ``cls`` does not have and
    each it has that ``data`` lacks (``write_request`` writes them all)."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown, missing = sorted(set(data) - known), sorted(known - set(data))
    if unknown or missing:
        problems = [f"unknown fields {unknown}"] * bool(unknown)
        problems += [f"missing fields {missing}"] * bool(missing)
        raise BurstRequestError(
            f"{where} is not this autotune's {cls.__name__}: {'; '.join(problems)} (the "
            "search and the trial run different versions of autotune?)"
        )
