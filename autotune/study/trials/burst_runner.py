"""How a search runs a burst (``BurstRunner``: the burst function and the settings its
bursts share) and what a trial's value measures (``Goal``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.burst.result import BurstResult
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec

__all__ = ["BurstFn", "BurstRunner", "Goal"]

# A burst function has run_burst's signature (tests pass fakes).
BurstFn = Callable[..., "BurstResult"]


@dataclass(frozen=True)
class Goal:
    """What a trial's value measures: ``throughput``, or ``time-to-train`` over a run of
    ``train_steps`` optimizer steps."""

    objective: str = "throughput"
    train_steps: int | None = None


@dataclass(frozen=True, kw_only=True)
class BurstRunner:
    """How this search runs a burst: the burst function and the settings every burst of the
    search shares."""

    spec: ModelSpec
    device: str
    budget_bytes: int
    burst_fn: BurstFn
    steps: int
    warmup: int
    timeout_s: float
    seed: int

    def run(
        self,
        config: TrainConfig,
        *,
        steps: int,
        timeout_s: float,
        threads: int | None = None,
        **options: Any,
    ) -> BurstResult:
        """One burst of ``config``; ``options`` (``on_step=``, ``verify=``) go to the burst
        function as they are, and ``threads`` when it caps torch's threads (a shared
        machine: ``SearchContext.burst_threads``). A burst function must not raise: an
        exception becomes an ``error`` result. Ctrl-C propagates."""
        if threads is not None:
            options["threads"] = threads
        try:
            return self.burst_fn(
                self.spec,
                config,
                steps=steps,
                warmup=self.warmup,
                budget_bytes=self.budget_bytes,
                timeout_s=timeout_s,
                device=self.device,
                seed=self.seed,
                **options,
            )
        except Exception as exc:
            from autotune.burst.result import BurstResult

            return BurstResult(
                status="error", reason=f"the burst raised {type(exc).__name__}: {exc}"
            )

    def throughput(self, result: BurstResult) -> float:
        """The result's throughput in the model's unit (0 when it has none)."""
        return float(self.spec.pick_throughput(result.tokens_per_s, result.samples_per_s) or 0.0)
