"""Which configs cannot fit, without running them.

Two rules, both conservative:

* **Dominance (a proof).** A config that needs at least as much memory as one that already
  ran out is infeasible too. "At least as much" means: the same precision, activation
  checkpointing, compile mode and model knobs, and a micro-batch and a sequence length
  each at least as large. On a CPU, where DataLoader workers are part of the measured
  process tree, also at least as many workers.
* **A fitted model (a prediction).** Per group of (precision, checkpointing, compile,
  model knobs), the measured peaks of the configs that ran are fitted by least squares as
  ``peak ~ a + b * micro_batch * seq_len`` (plus ``c * num_workers`` on a CPU when the
  workers vary). Once a group has two or more distinct sizes, a config predicted above
  ``margin x budget`` (1.15 by default) is skipped as "predicted over budget". A linear
  fit under-predicts memory that grows faster than linearly (attention's seq_len^2), so
  it errs towards running a config rather than wrongly skipping it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.config import TrainConfig
from autotune.units import format_bytes

__all__ = ["MemoryModel", "MemoryPoint", "Verdict"]

DEFAULT_MARGIN = 1.15


@dataclass(frozen=True, kw_only=True)
class MemoryPoint:
    """One measured config: its peak, and whether it ran out of the budget."""

    trial: int
    config: TrainConfig
    peak_bytes: int | None
    infeasible: bool


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Why a config is skipped without a burst."""

    kind: Literal["dominated", "predicted"]
    reason: str
    trial: int | None = None  # the OOM trial that dominates it
    predicted_bytes: float | None = None


def _group(config: TrainConfig) -> tuple[Any, ...]:
    knobs = tuple(sorted((str(k), repr(v)) for k, v in config.knobs.items()))
    return (config.precision, config.activation_checkpointing, config.compile, knobs)


def _tokens(config: TrainConfig) -> int:
    return config.micro_batch * config.seq_len


@dataclass
class MemoryModel:
    """Measured peaks and OOMs of one search; answers "is this config worth running?"."""

    budget_bytes: int
    device_kind: str = "cpu"
    margin: float = DEFAULT_MARGIN
    points: list[MemoryPoint] = field(default_factory=list)

    def add(
        self, trial: int, config: TrainConfig, *, peak_bytes: int | None, infeasible: bool
    ) -> None:
        """Record a measured config (``infeasible``: it ran out of memory or the budget)."""
        self.points.append(
            MemoryPoint(trial=trial, config=config, peak_bytes=peak_bytes, infeasible=infeasible)
        )

    def dominates(self, config: TrainConfig, oom: TrainConfig) -> bool:
        """Whether ``config`` needs at least the memory of ``oom`` (by the rule above)."""
        if _group(config) != _group(oom):
            return False
        if config.micro_batch < oom.micro_batch or config.seq_len < oom.seq_len:
            return False
        if self.device_kind == "cpu":
            if config.num_workers < oom.num_workers:
                return False
            if (config.prefetch_factor or 0) < (oom.prefetch_factor or 0):
                return False
        return True

    def dominating_oom(self, config: TrainConfig) -> MemoryPoint | None:
        """The first measured OOM that ``config`` dominates, if any."""
        for point in self.points:
            if point.infeasible and self.dominates(config, point.config):
                return point
        return None

    def predict(self, config: TrainConfig) -> float | None:
        """Predicted peak bytes, or None when the group has too few measured sizes."""
        import numpy as np

        group = _group(config)
        pts = [
            p
            for p in self.points
            if not p.infeasible and p.peak_bytes is not None and _group(p.config) == group
        ]
        tokens = np.array([_tokens(p.config) for p in pts], dtype=float)
        if len(set(tokens.tolist())) < 2:
            return None
        peaks = np.array([float(p.peak_bytes or 0) for p in pts])
        workers = np.array([p.config.num_workers for p in pts], dtype=float)
        columns = [np.ones_like(tokens), tokens]
        use_workers = self.device_kind == "cpu" and len(set(workers.tolist())) > 1
        if use_workers:
            columns.append(workers)
        design = np.stack(columns, axis=1)
        if np.linalg.matrix_rank(design) < design.shape[1]:
            design, use_workers = design[:, :2], False
        coef, *_ = np.linalg.lstsq(design, peaks, rcond=None)
        if coef[1] <= 0:  # no growth with size measured: nothing to extrapolate
            return None
        predicted = float(coef[0] + coef[1] * _tokens(config))
        if use_workers:  # a negative worker slope is noise: count workers as free then
            predicted += max(float(coef[2]), 0.0) * config.num_workers
        return predicted

    def verdict(self, config: TrainConfig) -> Verdict | None:
        """Why ``config`` should not be run, or None when it should."""
        oom = self.dominating_oom(config)
        if oom is not None:
            return Verdict(
                kind="dominated",
                reason=f"dominated by OOM trial #{oom.trial}",
                trial=oom.trial,
            )
        predicted = self.predict(config)
        if predicted is not None and predicted > self.margin * self.budget_bytes:
            return Verdict(
                kind="predicted",
                reason=(
                    f"predicted over budget: {format_bytes(predicted)} predicted, budget "
                    f"{format_bytes(self.budget_bytes)}"
                ),
                predicted_bytes=predicted,
            )
        return None

    def summary(self) -> Mapping[str, Any]:
        """Counts for reports: measured points and OOMs."""
        return {
            "points": len(self.points),
            "ooms": sum(1 for p in self.points if p.infeasible),
        }
