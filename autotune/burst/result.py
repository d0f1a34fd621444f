"""What a burst reports: ``BurstResult`` (status, throughput, step times, peak memory,
compile seconds, losses) and the rule that turns step times into those figures.

``step_figures`` is the one place where throughput (tokens/s or samples/s), the step-time
median and p90, warm-up and compile seconds and MFU come from; the statuses are those of
``BurstStatus`` (see ``autotune.burst.supervisor`` for who decides which).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from autotune.core.plain import MEASURED, from_plain, to_plain
from autotune.core.units import throughput_label
from autotune.engine.mfu import mfu

if TYPE_CHECKING:
    from autotune.config.train_config import TrainConfig
    from autotune.contract.spec import ModelSpec
    from autotune.core.device_caps import DeviceCaps

__all__ = [
    "STABLE_MIN_STEPS",
    "BurstResult",
    "BurstStatus",
    "percentile",
    "step_figures",
    "steps_stable",
    "micro_batches_even",
    "more_steps",
    "Minimum",
    "CUDA_MIN_WARMUP_S",
    "CUDA_MIN_TIMED_S",
    "MAX_WARMUP_STEPS",
    "MAX_TIMED_STEPS",
]

BurstStatus = Literal["ok", "oom", "timeout", "crash", "nan", "error", "pruned"]


@dataclass(frozen=True, kw_only=True)
class BurstResult:
    """One burst's outcome and its figures (None where the burst did not get that far)."""

    status: BurstStatus
    reason: str = ""
    device: str = "cpu"
    config: Mapping[str, Any] = field(default_factory=dict)
    timed_steps: int = 0
    warmup_steps: int = 0
    tokens_per_s: float | None = None  # None for a model measured in samples
    samples_per_s: float | None = None
    step_time_median_s: float | None = None
    step_time_p90_s: float | None = None
    warmup_s: float | None = None  # wall time of the warm-up steps, compilation included
    compile_s: float | None = None  # the first step's excess over the median: compilation
    peak_memory_bytes: int | None = None  # as the budget counts it (see autotune.engine.memory)
    mfu: float | None = None
    losses: tuple[float, ...] = ()
    step_times_s: tuple[float, ...] = ()
    overhead_s: float | None = None  # process start, imports, model build, data set-up
    wall_s: float | None = None
    eval_loss: float | None = None  # set by a verification burst
    checkpoint_bytes: int | None = None  # set by a verification burst
    verify_s: float | None = None  # ... its eval step and checkpoint save (the eval's compile)
    throughput_unit: Literal["tokens", "samples"] = "tokens"
    memory_source: str = ""  # how peak_memory_bytes was measured
    host_peak_bytes: int | None = None  # CPU memory of the process tree (also on CUDA)
    peak_processes: int | None = None  # most processes seen in the tree (workers + 1)
    cuda_context_bytes: int | None = None
    recompiles: int | None = None  # graphs torch.compile built during the timed steps
    threads: int | None = None  # torch's intra-op threads in the trial (fewer when shared)
    alloc_retries: int | None = None  # CUDA: the caching allocator's num_alloc_retries
    # A profiling burst's: where the step's time went (autotune.explain.Breakdown.to_dict)
    breakdown: Mapping[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def throughput(self) -> float | None:
        """The figure a search maximises: tokens/s, or samples/s for a samples model."""
        return self.tokens_per_s if self.throughput_unit == "tokens" else self.samples_per_s

    @property
    def throughput_label(self) -> str:
        """``"tokens/s"`` or ``"samples/s"``: the unit of :attr:`throughput`."""
        return throughput_label(self.throughput_unit)

    def to_dict(self) -> dict[str, Any]:
        return to_plain(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BurstResult:
        """The inverse of ``to_dict`` (unknown keys ignored; a NaN loss is a figure too)."""
        return from_plain(cls, data, path="burst", converters=MEASURED)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 100]) of a non-empty list."""
    if not values:
        raise ValueError("percentile of an empty list")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q=}")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


STABLE_MIN_STEPS = 2  # a figure is called stable on no fewer timed steps

# A burst's first warm-up step runs this many micro-batches, not the config's grad_accum:
# it pays the one-time work (the compile, the first allocations, the optimizer's state),
# which one micro-batch triggers as a whole step does, and the rest of a whole step would
# only repeat what the timed steps measure (mu's naive config, 32 micro-batches a step,
# spent 4.8 s of a 20 s trial on the 2-core EPYC warming up). The compile is that step's
# excess over its micro-batches' share of a timed step (``step_figures``).
FIRST_WARMUP_MICRO_BATCHES = 1


# A CUDA step takes milliseconds, so a fixed count of them times a few tens of ms: too
# short for a figure. Measured on an H200 (mu, mb 32 bf16 compiled, 17 ms a step): 4 timed
# steps after 3 warm-up ones gave 327,470 then 232,037 tokens/s in two race rounds (34%
# apart). A one-process CUDA burst therefore warms up for at least CUDA_MIN_WARMUP_S and
# times at least CUDA_MIN_TIMED_S of steps, running more of them where they are short, up
# to MAX_WARMUP_STEPS / MAX_TIMED_STEPS. A CPU step is tenths of a second to seconds: the
# count asked for already times that much, so the CPU's minimum is none.
CUDA_MIN_WARMUP_S = 1.0
CUDA_MIN_TIMED_S = 2.0
MAX_WARMUP_STEPS = 200
MAX_TIMED_STEPS = 500


def more_steps(done: int, asked: int, seconds: float, min_s: float, *, most: int) -> bool:
    """Whether a phase (warm-up or timed) runs another step: fewer than ``asked`` done, or
    fewer than ``min_s`` seconds spent in it and fewer than ``most`` steps done."""
    if done < asked:
        return True
    return seconds < min_s and done < most


@dataclass(frozen=True)
class Minimum:
    """The least time a burst's warm-up and timed phases take (seconds; 0: only the
    counts asked for): a phase shorter than that runs more steps (``more_steps``)."""

    warmup_s: float = 0.0
    timed_s: float = 0.0

    def more_warmup(self, times: Sequence[float], asked: int) -> bool:
        if asked == 0:  # no warm-up asked for: none added
            return False
        # the first step carries the one-time work (compilation, the first allocations):
        # the minimum counts the steady steps after it
        steady = sum(times[1:])
        return more_steps(len(times), asked, steady, self.warmup_s, most=MAX_WARMUP_STEPS)

    def more_timed(self, times: Sequence[float], asked: int) -> bool:
        return more_steps(len(times), asked, sum(times), self.timed_s, most=MAX_TIMED_STEPS)

    def most_steps(self, warmup: int, steps: int) -> int:
        """The most warm-up and timed steps the burst can run."""
        most_warmup = max(warmup, MAX_WARMUP_STEPS) if self.warmup_s > 0 else warmup
        return most_warmup + (max(steps, MAX_TIMED_STEPS) if self.timed_s > 0 else steps)


def steps_stable(
    step_times: list[float], within: float, *, min_steps: int = STABLE_MIN_STEPS
) -> bool:
    """Whether the timed steps so far give a stable figure: at least ``min_steps`` of
    them, the slowest within ``within`` (a fraction) of the fastest. More steps would
    move the median by less than that, so a trial may end its timed steps there."""
    if len(step_times) < min_steps or min(step_times) <= 0:
        return False
    return max(step_times) <= (1 + within) * min(step_times)


def micro_batches_even(micro_times: Sequence[float], within: float) -> bool:
    """Whether one timed step's micro-batches (forward and backward each, on the CPU) ran
    evenly: at least ``STABLE_MIN_STEPS`` of them, their mean within ``within`` of their
    median, so no micro-batch was held up. A trial's first timed step that ran evenly is
    its screen's figure, where two steps would have to agree (``TRIAL_STABLE_WITHIN`` in
    the objective says why)."""
    if len(micro_times) < STABLE_MIN_STEPS or min(micro_times) <= 0:
        return False
    return statistics.fmean(micro_times) <= (1 + within) * statistics.median(micro_times)


def step_figures(
    *,
    spec: ModelSpec,
    config: TrainConfig,
    step_times: list[float],
    warmup_times: list[float],
    caps: DeviceCaps | None,
    world_size: int = 1,
) -> dict[str, Any]:
    """Throughput, step-time median/p90, warm-up, compile seconds and MFU from step times
    (the config's global batch a step, over ``world_size`` processes for the MFU)."""
    figures: dict[str, Any] = {
        "timed_steps": len(step_times),
        "warmup_steps": len(warmup_times),
        "step_times_s": tuple(step_times),
        "warmup_s": sum(warmup_times) if warmup_times else None,
        "throughput_unit": spec.throughput_unit,
    }
    if not step_times:
        return figures
    median = statistics.median(step_times)
    samples_per_s = config.global_batch / median if median > 0 else None
    figures["step_time_median_s"] = median
    figures["step_time_p90_s"] = percentile(step_times, 90)
    figures["samples_per_s"] = samples_per_s
    if samples_per_s is not None and spec.throughput_unit == "tokens":
        figures["tokens_per_s"] = samples_per_s * spec.tokens_per_sample(config.seq_len)
    if config.compile != "off":
        share = min(1.0, FIRST_WARMUP_MICRO_BATCHES / config.grad_accum) if warmup_times else 1.0
        first = (warmup_times or step_times)[0]
        figures["compile_s"] = max(0.0, first - median * share)
    figures["mfu"] = mfu(spec, config, caps, samples_per_s=samples_per_s, world_size=world_size)
    return figures
