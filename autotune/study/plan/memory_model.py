"""Which configs cannot fit, without running them.

Three rules, all conservative:

* **Dominance (a proof).** A config that needs at least as much memory as one that already
  ran out is infeasible too. "At least as much" means: the same group (precision,
  activation checkpointing, compile mode, model knobs, the allocator's expandable
  segments and the parallel setting), and a micro-batch and a sequence length each at
  least as large. On a CPU, where DataLoader workers are part of the measured process
  tree, also at least as many workers.
* **A fitted model (a prediction).** Per group, the measured peaks of the configs that
  ran are fitted by least squares as ``peak ~ a + b * micro_batch * seq_len`` (plus
  ``c * num_workers`` on a CPU when the workers vary). Once a group has two or more
  distinct sizes, a config predicted above ``margin x budget`` (1.15 by default) is
  skipped as "predicted over budget". A linear fit under-predicts memory that grows
  faster than linearly (attention's seq_len^2), so it errs towards running a config
  rather than wrongly skipping it.
* **The edge of a class that ran out (a bound).** Once a group has an OOM, the model's
  benefit of doubt is spent: a config of the group runs only if it is predicted within the
  budget itself (no margin) by both the fit and a proportional bound through the largest
  config that fitted (``peak_k x tokens / tokens_k``: with a fixed part >= 0 and linear
  growth, it never under-predicts above that config). Without a fit the bound alone
  decides, so a class whose first big micro-batch ran out climbs towards its edge through
  sizes that fit instead of trying another size that does not: at most one executed OOM
  per class when memory grows linearly (the search tests check it). A group where nothing
  fitted yet borrows the ratio of the most memory-hungry group measured (peak per token at
  its largest config). ``edge_micro_batch`` is the largest micro-batch that rule lets run
  (the predicted edge).
* **A class nothing measured, scaled (an estimate, CUDA).** The playbook's start picks its
  micro-batch before its class ran: ``scaled`` takes a measured config of a class that
  needs at least as much memory per token (fp32, eager, no checkpointing, the same knobs)
  and splits its peak into a fixed part it knows a lower bound of (AdamW's 16 bytes a
  parameter, the CUDA context) and the rest, which it grows with the tokens.

Two figures describe how a measured config sat against the budget (``edge_reason``): a
config whose CUDA allocator had to free its cache and retry (``num_alloc_retries``) or
whose peak passed ``EDGE_FRACTION`` (90%) of the budget is "at the edge": it fitted in a
burst, and may not in a long run (fragmentation, an eval step, a longer batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.config.train_config import TrainConfig
from autotune.core.units import format_bytes

__all__ = [
    "EDGE_FRACTION",
    "MemoryModel",
    "MemoryPoint",
    "MemoryVerdict",
    "edge_reason",
    "mean_abs_error_pct",
    "prediction_error_pct",
]

DEFAULT_MARGIN = 1.15
EDGE_FRACTION = 0.9  # a peak above this fraction of the budget is at the edge
_MAX_MICRO_BATCH = 1 << 20  # the search for the predicted edge stops here


@dataclass(frozen=True, kw_only=True)
class MemoryPoint:
    """One measured config: its peak, and whether it ran out of the budget."""

    trial: int
    config: TrainConfig
    peak_bytes: int | None
    infeasible: bool
    context_bytes: int | None = None  # the CUDA context inside the peak (None: unknown)


@dataclass(frozen=True, kw_only=True)
class MemoryVerdict:
    """Why a config is skipped without a burst."""

    kind: Literal["dominated", "predicted"]
    reason: str
    trial: int | None = None  # the OOM trial that dominates it
    predicted_bytes: float | None = None


def _group(config: TrainConfig) -> tuple[Any, ...]:
    """The knobs that change memory other than through the batch's size: configs compare
    only within a group. The allocator's expandable segments can fit what ran out without
    them; DDP and FSDP hold parameters, gradients and optimizer state differently; float8
    linears keep float8 copies of their inputs and weights for the backward."""
    knobs = tuple(sorted((str(k), repr(v)) for k, v in config.knobs.items()))
    parallel = config.parallel.label() if config.parallel is not None else None
    return (
        config.precision,
        config.activation_checkpointing,
        config.compile,
        knobs,
        config.expandable_segments,
        config.fp8_linears,
        parallel,
    )


# compile modes that hold no more memory than eager (the CUDA-graph ones keep a private
# pool and static buffers of their own)
_NO_GRAPHS = ("off", "default", "max-autotune-no-cudagraphs")


def _no_leaner(measured: TrainConfig, config: TrainConfig) -> bool:
    """Whether ``measured`` needs at least ``config``'s memory per token: fp32 activations
    against any precision, no checkpointing against any, eager against a compile mode
    without CUDA graphs, a sequence at least as long (attention's memory per token grows
    with it), and the same model knobs (eager attention holds its matrix), allocator and
    parallel setting."""
    low = ("bf16", "fp16")
    return (
        (measured.precision not in low or config.precision in low)
        and (not measured.activation_checkpointing or config.activation_checkpointing)
        and measured.compile in ("off", config.compile)
        and config.compile in _NO_GRAPHS
        and measured.seq_len >= config.seq_len
        and _group(measured)[3:] == _group(config)[3:]
    )


# (all parameters, the trained ones): what the memory model's ``scaled`` takes of a model
Params = tuple[int, int]


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
        self,
        trial: int,
        config: TrainConfig,
        *,
        peak_bytes: int | None,
        infeasible: bool,
        context_bytes: int | None = None,
    ) -> None:
        """Record a measured config (``infeasible``: it ran out of memory or the budget)."""
        self.points.append(
            MemoryPoint(trial=trial, config=config, peak_bytes=peak_bytes,
                        infeasible=infeasible, context_bytes=context_bytes)
        )  # fmt: skip

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

    def _measured(self, group: tuple[Any, ...]) -> list[MemoryPoint]:
        return [
            p
            for p in self.points
            if not p.infeasible and p.peak_bytes is not None and _group(p.config) == group
        ]

    def predict(self, config: TrainConfig) -> float | None:
        """Predicted peak bytes by the group's least-squares fit, or None when the group
        has too few measured sizes (or its peaks do not grow with size)."""
        import numpy as np

        pts = self._measured(_group(config))
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

    def first_oom(self, config: TrainConfig) -> MemoryPoint | None:
        """The first OOM measured in ``config``'s group, if any."""
        group = _group(config)
        return next((p for p in self.points if p.infeasible and _group(p.config) == group), None)

    def bound(self, config: TrainConfig) -> float | None:
        """The conservative prediction of a group that ran out: the larger of the fit and
        the proportional bound through the group's largest config that fitted (None: the
        group has no OOM, or nothing measured fitted)."""
        if self.first_oom(config) is None:
            return None
        ratio = self._bytes_per_token(_group(config))
        if ratio is None:  # nothing of the group fitted: the hungriest group's ratio
            ratios = [self._bytes_per_token(g) for g in {_group(p.config) for p in self.points}]
            ratio = max((r for r in ratios if r is not None), default=None)
        if ratio is None:
            return None
        proportional = ratio * _tokens(config)
        fitted = self.predict(config)
        return proportional if fitted is None else max(proportional, fitted)

    def _bytes_per_token(self, group: tuple[Any, ...]) -> float | None:
        """Peak per token of the group's largest config that fitted (None: none did)."""
        pts = self._measured(group)
        if not pts:
            return None
        largest = max(pts, key=lambda p: (_tokens(p.config), p.peak_bytes or 0))
        return float(largest.peak_bytes or 0) / _tokens(largest.config)

    def edge_micro_batch(self, config: TrainConfig) -> int | None:
        """The largest micro-batch of ``config``'s group (its sequence length and workers)
        predicted to fit the budget: by the bound where the group ran out, else by the
        fit; None when neither can predict. 0: not even a micro-batch of 1."""
        predictor = self.bound if self.first_oom(config) is not None else self.predict
        if predictor(config) is None:
            return None

        def fits(micro_batch: int) -> bool:
            value = predictor(dataclasses.replace(config, micro_batch=micro_batch))
            return value is not None and value <= self.budget_bytes

        low, high = 0, _MAX_MICRO_BATCH  # fits(low) holds (vacuously at 0)
        if fits(high):
            return high
        while high - low > 1:  # predicted peaks grow with the micro-batch: bisect
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return low

    def predicted_to_fit(self, config: TrainConfig, *, params: Params | None = None) -> bool:
        """Whether ``config`` is predicted within the budget itself (no margin): no OOM
        dominates it, and neither the fit nor a ran-out class's bound puts it over. A
        config neither can predict is scaled from another class (``scaled``, given the
        model's ``params``); one nothing predicts counts as fitting. The expert starts
        pick by it."""
        if self.dominating_oom(config) is not None:
            return False
        predictions = [self.predict(config), self.bound(config)]
        if params is not None and predictions == [None, None]:
            predictions.append(self.scaled(config, params=params))
        return all(p is None or p <= self.budget_bytes for p in predictions)

    def scaled(self, config: TrainConfig, *, params: Params) -> float | None:
        """``config``'s peak scaled from a measured config of a class that needs at least
        as much memory per token (``_no_leaner``) and at most its tokens, on CUDA, in one
        process: the fixed part is AdamW's 16 bytes a trained parameter (fp32 weights,
        gradients, two moments) and 4 a frozen one, plus the CUDA context; the rest grows
        with the tokens (a larger fixed part the model does not know of counts as growth:
        an over-estimate); plus 2 bytes a parameter for autocast's low-precision copies.
        A measured peak below that fixed part breaks the premise: that config says
        nothing. None: no config says anything. Found on an H200: gpt2-124m's playbook
        config, its class unmeasured, took the space's largest micro-batch (64) and ran
        out of a 24 GB budget."""
        if self.device_kind != "cuda" or config.parallel is not None:
            return None
        total, trained = params
        casts = 2 * total if config.precision in ("bf16", "fp16") else 0
        estimates = []
        for p in self.points:
            if p.infeasible or not p.peak_bytes or p.context_bytes is None:
                continue
            if _tokens(p.config) > _tokens(config) or not _no_leaner(p.config, config):
                continue
            fixed = 16 * trained + 4 * (total - trained) + p.context_bytes
            if p.peak_bytes <= fixed:
                continue
            per_token = (p.peak_bytes - fixed) / _tokens(p.config)
            estimates.append(fixed + casts + per_token * _tokens(config))
        return max(estimates, default=None)

    def verdict(self, config: TrainConfig) -> MemoryVerdict | None:
        """Why ``config`` should not be run, or None when it should."""
        oom = self.dominating_oom(config)
        if oom is not None:
            return MemoryVerdict(
                kind="dominated",
                reason=f"dominated by OOM trial #{oom.trial}",
                trial=oom.trial,
            )
        oom = self.first_oom(config)
        bound = self.bound(config) if oom is not None else None
        if oom is not None and bound is not None and bound > self.budget_bytes:
            edge = self.edge_micro_batch(config)
            return MemoryVerdict(
                kind="predicted",
                reason=(
                    f"predicted over budget past the edge of its class: {format_bytes(bound)} "
                    "predicted, "
                    f"budget {format_bytes(self.budget_bytes)} (OOM trial #{oom.trial}; "
                    f"largest micro-batch predicted to fit: {edge})"
                ),
                predicted_bytes=bound,
            )
        predicted = self.predict(config)
        if predicted is not None and predicted > self.margin * self.budget_bytes:
            return MemoryVerdict(
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


def prediction_error_pct(predicted: float, measured: float) -> float:
    """The prediction's error in % of the measured peak (positive: over-predicted)."""
    if measured <= 0:
        raise ValueError(f"the measured peak must be positive, got {measured=}")
    return 100.0 * (predicted - measured) / measured


def mean_abs_error_pct(errors: Sequence[float | None]) -> float | None:
    """The mean absolute prediction error in % (None when no prediction was checked)."""
    checked = [abs(e) for e in errors if e is not None]
    return sum(checked) / len(checked) if checked else None


def edge_reason(
    *,
    peak_bytes: int | None,
    budget_bytes: int,
    alloc_retries: int | None = None,
    fraction: float = EDGE_FRACTION,
) -> str:
    """Why a config that fitted is at the edge of the budget ("" when it is not): its
    allocator had to retry, or its peak passed ``fraction`` of the budget."""
    reasons = []
    if alloc_retries:
        reasons.append(f"the CUDA allocator retried {alloc_retries} allocation(s)")
    if peak_bytes is not None and peak_bytes > fraction * budget_bytes:
        reasons.append(
            f"peak {format_bytes(peak_bytes)} is {peak_bytes / budget_bytes:.0%} of the budget "
            f"{format_bytes(budget_bytes)} (over {fraction:.0%})"
        )
    return "; ".join(reasons)
