"""The burst: one short, real, isolated training run of one config, honestly timed.

(Interface fixed here; the implementation is being built.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from autotune.config import TrainConfig
    from autotune.models.spec import ModelSpec

__all__ = ["BurstResult", "BurstStatus", "run_burst"]

BurstStatus = Literal["ok", "oom", "timeout", "crash", "nan", "error", "pruned"]


@dataclass(frozen=True, kw_only=True)
class BurstResult:
    status: BurstStatus
    reason: str = ""
    device: str = "cpu"
    config: Mapping[str, Any] = field(default_factory=dict)
    timed_steps: int = 0
    warmup_steps: int = 0
    tokens_per_s: float | None = None
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    warmup_s: float | None = None  # wall time of the warm-up steps, compilation included
    compile_s: float | None = None  # the first step's excess over the median: compilation
    peak_memory_bytes: int | None = None
    mfu: float | None = None
    losses: tuple[float, ...] = ()
    step_times_s: tuple[float, ...] = ()
    overhead_s: float | None = None  # process start, imports, model build, data set-up
    wall_s: float | None = None
    eval_loss: float | None = None  # set by a verification burst
    checkpoint_bytes: int | None = None  # set by a verification burst

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["config"] = dict(self.config)
        data["losses"] = list(self.losses)
        data["step_times_s"] = list(self.step_times_s)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BurstResult:
        names = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["losses"] = tuple(kwargs.get("losses", ()))
        kwargs["step_times_s"] = tuple(kwargs.get("step_times_s", ()))
        return cls(**kwargs)


def run_burst(
    spec: ModelSpec,
    config: TrainConfig,
    *,
    steps: int = 10,
    warmup: int = 3,
    budget_bytes: int | None = None,
    timeout_s: float = 300.0,
    device: str = "cpu",
    seed: int = 0,
    verify: bool = False,
    on_step: Callable[[int, float], bool] | None = None,
) -> BurstResult:
    raise NotImplementedError
