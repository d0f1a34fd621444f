"""Which limit a config's step hits, with its evidence and the knobs that address it
(``classify``), and the order a search should turn knobs in next (``refine_order``).

The limits, checked in this order (every one that holds is a finding; the first is the
verdict):

- memory-bound at the budget: the peak is within ``MEMORY_SHARE`` of the budget;
- input-bound: the step waits on the data loader for ``INPUT_SHARE`` of its time or more;
- overhead-bound: on a GPU, the device idles between kernels for ``IDLE_SHARE`` of the
  compute time; on a CPU, the time outside operators is ``OUTSIDE_SHARE`` of the step or
  more, or the step runs many (``MANY_OPS``) small (under ``SMALL_OP_S``) operators;
- compute-bound: MFU (the spec's FLOPs per sample against the device's peak) reaches
  ``COMPUTE_MFU``; where the device has no known peak, a step spent inside operators
  (``OPS_SHARE``) is called compute-bound and the evidence says MFU is unknown.

A step none of these describes is ``balanced``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.core.plain import to_plain
from autotune.explain.breakdown import Breakdown

__all__ = ["KNOBS_BY_LIMIT", "Finding", "StepVerdict", "classify", "refine_order"]

MEMORY_SHARE = 0.9
INPUT_SHARE = 0.2
IDLE_SHARE = 0.3
OUTSIDE_SHARE = 0.4
MANY_OPS = 200
SMALL_OP_S = 50e-6
COMPUTE_MFU = 0.35
OPS_SHARE = 0.7

# The registry's knobs (autotune/config/knobs.py) that move each limit, first one first.
KNOBS_BY_LIMIT: dict[str, tuple[str, ...]] = {
    "memory-bound": ("activation_checkpointing", "micro_batch", "expandable_segments"),
    "input-bound": ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers"),
    "overhead-bound": ("compile", "micro_batch"),
    "compute-bound": ("precision", "compile"),
    "balanced": (),
}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One limit the step hits, why we say so, and the knobs that address it."""

    kind: str
    evidence: str
    knobs: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class StepVerdict:
    """The limit a step hits first (``kind``), every finding, and what was not known."""

    kind: str
    findings: tuple[Finding, ...]
    unknown: tuple[str, ...] = ()  # e.g. "MFU unknown: no peak FLOP/s for cpu"

    @property
    def knobs(self) -> tuple[str, ...]:
        """Every finding's knobs, the verdict's first, each once."""
        return tuple(dict.fromkeys(k for f in self.findings for k in f.knobs))

    @property
    def evidence(self) -> str:
        return "; ".join(f.evidence for f in self.findings if f.kind == self.kind)

    def summary(self) -> str:
        """One line: the verdict, its evidence and its knobs."""
        knobs = ", ".join(KNOBS_BY_LIMIT.get(self.kind, ()))
        text = f"{self.kind}: {self.evidence}" if self.evidence else self.kind
        return text + (f" (try {knobs})" if knobs else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "findings": [to_plain(f) for f in self.findings],
            "knobs": list(self.knobs),
            "unknown": list(self.unknown),
        }


def classify(
    breakdown: Breakdown,
    *,
    mfu: float | None = None,
    peak_bytes: int | None = None,
    budget_bytes: int | None = None,
) -> StepVerdict:
    """The step's limits, from its breakdown, its MFU and its peak memory."""
    findings: list[Finding] = []
    unknown: list[str] = []
    if peak_bytes is not None and budget_bytes:
        share = peak_bytes / budget_bytes
        if share >= MEMORY_SHARE:
            findings.append(_finding("memory-bound", f"peak memory is {share:.0%} of the budget"))
    data = breakdown.share("data_wait")
    if data >= INPUT_SHARE:
        findings.append(_finding("input-bound", f"data wait is {data:.0%} of the step"))
    overhead = _overhead_evidence(breakdown)
    if overhead:
        findings.append(_finding("overhead-bound", overhead))
    compute, why_unknown = _compute_evidence(breakdown, mfu)
    if why_unknown:
        unknown.append(why_unknown)
    if compute:
        findings.append(_finding("compute-bound", compute))
    kind = findings[0].kind if findings else "balanced"
    return StepVerdict(kind=kind, findings=tuple(findings), unknown=tuple(unknown))


def _finding(kind: str, evidence: str) -> Finding:
    return Finding(kind=kind, evidence=evidence, knobs=KNOBS_BY_LIMIT[kind])


def _compute_time(b: Breakdown) -> float:
    """The step less its data wait: the part that compute, launches and copies take."""
    return max(0.0, b.step_s - b.parts.get("data_wait", 0.0))


def _overhead_evidence(b: Breakdown) -> str:
    """Why the step is overhead-bound, or ``""``."""
    compute = _compute_time(b)
    if compute <= 0:
        return ""
    if b.device_busy_s is not None:  # CUDA: the GPU idles between kernels
        idle = 1.0 - min(1.0, b.device_busy_s / compute)
        return f"the GPU idles {idle:.0%} of the compute time" if idle >= IDLE_SHARE else ""
    outside = 1.0 - min(1.0, b.op_s / compute)
    mean_op = b.op_s / b.ops_per_step if b.ops_per_step else 0.0
    many_small = b.ops_per_step >= MANY_OPS and mean_op < SMALL_OP_S
    if outside < OUTSIDE_SHARE and not many_small:
        return ""
    return (
        f"{outside:.0%} of the compute time is outside operators (rest {b.share('rest'):.0%}); "
        f"{b.ops_per_step:.0f} operators per step, {mean_op * 1e6:.0f} us each on average"
    )


def _compute_evidence(b: Breakdown, mfu: float | None) -> tuple[str, str]:
    """(why the step is compute-bound or ``""``, why MFU is unknown or ``""``)."""
    if mfu is not None:
        return (f"MFU {mfu:.0%}" if mfu >= COMPUTE_MFU else ""), ""
    unknown = f"MFU unknown: no peak FLOP/s known for {b.device}"
    compute = _compute_time(b)
    inside = b.op_s / compute if compute > 0 else 0.0
    if inside >= OPS_SHARE and not _overhead_evidence(b):
        return f"{inside:.0%} of the compute time inside operators (MFU unknown)", unknown
    return "", unknown


def refine_order(verdict: StepVerdict) -> list[str]:
    """The registry's searched knobs in the order to turn them next: the verdict's knobs
    first (its first finding's, then the others'), then the rest in registry order."""
    from autotune.config.knobs import searched_knobs
    from autotune.config.train_config import TrainConfig

    searched = [k.name for k in searched_knobs(TrainConfig)]
    first = [k for k in verdict.knobs if k in searched]
    return first + [k for k in searched if k not in first]
