"""What the parent sends the trial: one pickle, written by ``write_request`` and read back
by the trial (``read_request``, ``load_spec``). A one-process trial reads it from a file
with no name that it inherits (``fd:N``), so the parent leaves nothing on disk; torchrun's
ranks inherit no descriptors and read it by its path in the folder the parent made.

It holds the config, the step counts (and when the timed steps may end early), the
budget, the device, the seed and the spec: by its source (a built-in name,
``pkg.mod:attr`` or ``file.py:attr``) with its arguments, re-loaded in the trial, or
pickled whole where it has no source.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec

__all__ = ["load_spec", "read_request", "spec_payload", "write_request"]


def write_request(
    out: IO[bytes],
    spec: ModelSpec,
    config: TrainConfig,
    *,
    steps: int,
    warmup: int,
    budget_bytes: int | None,
    device: str,
    seed: int,
    verify: bool,
    threads: int | None,
    workdir: str | None = None,
    profile: bool = False,
    profile_steps: int = 3,
    trace_path: str | None = None,
    stable_within: float | None = None,
    min_warmup_s: float = 0.0,
    min_timed_s: float = 0.0,
) -> None:
    """Write the trial's request to ``out``; raises if the spec cannot travel. ``workdir``
    is the trial's folder where the parent made one (torchrun); None: the trial makes its
    own and fills it in.

    ``profile`` adds ``profile_steps`` profiled steps after the timed ones (their
    breakdown comes back in the result; ``trace_path`` receives their Chrome trace).
    ``stable_within``: the trial may end its timed steps early once they agree within
    this fraction (``autotune.burst.result.steps_stable``). ``min_warmup_s`` and
    ``min_timed_s``: a one-process trial runs more warm-up and timed steps than asked
    where they take less time than that (``autotune.burst.result.more_steps``)."""
    request: dict[str, Any] = {
        "config": config,
        "steps": steps,
        "warmup": warmup,
        "budget_bytes": budget_bytes,
        "device": device,
        "seed": seed,
        "verify": verify,
        "workdir": workdir,
        "threads": threads,
        "profile": profile,
        "profile_steps": profile_steps,
        "trace_path": trace_path,
        "stable_within": stable_within,
        "min_warmup_s": min_warmup_s,
        "min_timed_s": min_timed_s,
    }
    request.update(spec_payload(spec))
    pickle.dump(request, out)
    out.flush()


def spec_payload(spec: ModelSpec) -> dict[str, Any]:
    """How the child gets the spec: re-loaded from its source with these args, or pickled."""
    if spec.source:
        args = dict(spec.args)
        pickle.dumps(args)  # fail here, with a clear message, if the args cannot travel
        return {"spec_source": spec.source, "spec_args": args, "spec": None}
    pickle.dumps(spec)  # fail here, with a clear message, rather than in the child
    return {"spec_source": None, "spec_args": None, "spec": spec}


def read_request(source: str) -> dict[str, Any]:
    """The request ``write_request`` wrote (in the trial), from ``source``: ``fd:N``, an
    inherited descriptor of a file with no name, or a path."""
    if source.startswith("fd:"):
        with os.fdopen(int(source.removeprefix("fd:")), "rb") as f:
            f.seek(0)
            request: dict[str, Any] = pickle.load(f)
        return request
    with open(source, "rb") as f:
        request = pickle.load(f)
    return request


def load_spec(request: Mapping[str, Any]) -> ModelSpec:
    """The request's spec: the pickled one, or its source loaded with the request's args."""
    from autotune.models.registry import load_model

    if request.get("spec") is not None:
        spec: ModelSpec = request["spec"]
        return spec
    spec = load_model(request["spec_source"])
    args = dict(request["spec_args"])
    if dict(spec.args) != args:
        spec = spec.with_args(**args)
    return spec
